"""Drift bounds from the band's feasible slopes, carried through the solve to each host's
mapping, on generated traces: a queue that builds up over the history tilts the band by more
than any fixed allowance, and the bound must still cover the truth."""

import json
import math

import numpy as np

from clockfabric.agent.services.clock import valid_map
from clockfabric.clock import solver as solver_module
from clockfabric.clock.fit import MIN_DRIFT_BOUND, feasible_slopes, fit_band
from clockfabric.clock.graph import probe_peers
from clockfabric.clock.mapping import DRIFT_BOUND, Mapping
from clockfabric.clock.network import Edges, solve
from clockfabric.clock.solver import Solver
from tests.unit.test_clock_sync import EPOCH, NOW_TAU, edge_row, make_fleet

HISTORY_NS = 16_000_000_000
CENTER = EPOCH + HISTORY_NS // 2


def trace(drift: float, *, floor_ns: float, fwd_ramp_ns: float = 0.0, n: int = 400,
          seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """16 s of forward and reverse points around the line offset 0, slope `drift`; the forward
    direction's queue grows linearly to `fwd_ramp_ns` (a queue filling as a TCP stream ramps up),
    with a little jitter on top of both floors."""
    rng = np.random.default_rng(seed)
    t = EPOCH + np.sort(rng.integers(0, HISTORY_NS, n))
    line = drift * (t - CENTER).astype(float)
    ramp = fwd_ramp_ns * (t - EPOCH) / HISTORY_NS
    fwd_y = line + floor_ns + ramp + rng.exponential(200.0, n)
    rev_y = line - floor_ns - rng.exponential(200.0, n)
    return (np.column_stack([t, np.rint(fwd_y)]).astype(np.int64),
            np.column_stack([t, np.rint(rev_y)]).astype(np.int64))


def test_a_growing_one_way_queue_tilts_the_drift_past_the_fixed_allowance_but_not_past_its_bound():
    true_drift = 3e-6
    fwd, rev = trace(true_drift, floor_ns=5_000, fwd_ramp_ns=40_000)
    fit = fit_band(fwd, rev, CENTER)
    assert fit is not None and fit.pinned
    error = abs(fit.drift - true_drift)
    assert error > DRIFT_BOUND  # the constant allowance would not cover this
    assert error <= fit.drift_bound
    assert abs(fit.offset_ns) <= fit.bound_ns()  # the truth is offset 0 at the centre


def test_feasible_slopes_hold_the_true_slope_and_narrow_with_the_band():
    widths = []
    for seed, floor in enumerate((20_000, 5_000, 1_000)):
        fwd, rev = trace(-7e-6, floor_ns=floor, seed=seed)
        xu, yu = (fwd[:, 0] - CENTER).astype(float), fwd[:, 1].astype(float)
        xl, yl = (rev[:, 0] - CENTER).astype(float), rev[:, 1].astype(float)
        low, high = feasible_slopes(xu, yu, xl, yl)
        assert low <= -7e-6 <= high
        widths.append(high - low)
    assert widths[0] > widths[1] > widths[2]
    # the two floors, 2 us apart over about 16 s, leave a few hundred ppb either way
    assert widths[2] < 1e-6


def test_an_idle_band_gives_a_tight_drift_bound():
    fwd, rev = trace(1e-5, floor_ns=500)
    fit = fit_band(fwd, rev, CENTER)
    assert fit is not None
    assert MIN_DRIFT_BOUND <= fit.drift_bound < 200e-9
    assert abs(fit.drift - 1e-5) <= fit.drift_bound


def test_an_unpinned_fit_allows_any_slope_in_the_search_range():
    fwd, rev = trace(0.0, floor_ns=1_000, n=40)
    late = fwd[fwd[:, 0] > CENTER]
    early = rev[rev[:, 0] < CENTER - 100_000_000]
    fit = fit_band(late, early, CENTER, prior_drift=2e-6)
    assert fit is not None and not fit.pinned
    assert fit.drift == 2e-6 and fit.drift_bound >= 1e-3


def test_a_given_drift_carries_its_bound():
    fwd, rev = trace(0.0, floor_ns=1_000)
    fit = fit_band(fwd, rev, CENTER, drift=1e-7, drift_bound=3e-7)
    assert fit is not None and fit.drift_bound == 3e-7
    assert fit.bound_ns() == abs(fit.margin_ns) + 3e-7 * fit.reach_ns


def test_a_host_drift_bound_is_the_cheapest_path_of_edge_drift_bounds():
    # a chain 0 - 1 - 2 with exact edges, and a loose shortcut 0 - 2
    x, y = np.array([0.0, 100.0, -50.0]), np.array([0.0, 2e-6, -1e-6])
    src, dst = np.array([0, 1, 0]), np.array([1, 2, 2])
    t0 = EPOCH
    a = x[dst] - x[src]
    b = (y[dst] - y[src]) / (1 + y[src])
    edges = Edges(src, dst, a, b, np.full(3, t0, dtype=np.int64), np.ones(3), np.zeros(3),
                  np.array([1e-8, 2e-8, 5e-7]))
    sol = solve(3, edges, 0, t0)
    assert sol.drift_limit[0] == 0.0
    assert math.isclose(sol.drift_limit[1], 1e-8, rel_tol=1e-3)
    assert math.isclose(sol.drift_limit[2], 3e-8, rel_tol=1e-3)  # through host 1, not the shortcut
    assert (sol.drift_bound <= sol.drift_limit).all()


def test_a_mapping_grows_its_bound_by_its_own_drift_bound():
    m = Mapping(EPOCH, 10.0, 1e-6, 50.0, drift_bound=2e-6)
    assert m.bound_at(EPOCH + 10**9) == 50.0 + 2e-6 * 1e9
    assert Mapping.from_dict(m.as_dict()) == m
    old = m.as_dict()
    del old["drift_bound"]  # a sender from before drift bounds
    assert Mapping.from_dict(old).drift_bound == DRIFT_BOUND


def test_a_mapping_on_the_wire_keeps_what_its_figures_are_worth_and_its_bounds_still_bound():
    rng = np.random.default_rng(8)
    for _ in range(2_000):
        bounds = 10.0 ** rng.uniform(-20, 7, 4)
        offset, drift = float(rng.uniform(-5e8, 5e8)), float(rng.uniform(-5e-4, 5e-4))
        m = Mapping(EPOCH + int(rng.integers(0, 10**12)), offset, drift, float(bounds[0]), drift_bound=float(bounds[1]),
                    limit_ns=float(bounds[2]), drift_limit=float(bounds[3]))
        wire = Mapping.from_dict(m.as_dict())
        for field in ("uncertainty_ns", "drift_bound", "limit_ns", "drift_limit"):
            sent, held = getattr(wire, field), getattr(m, field)
            assert held <= sent <= held * 1.001, (field, held, sent)
        assert abs(wire.offset_ns - m.offset_ns) <= 5e-4 and abs(wire.drift - m.drift) <= 5e-16
        local = m.t0_ns + 60 * 10**9
        assert abs(wire.global_ns(local) - m.global_ns(local)) <= 1
    text = json.dumps(Mapping(EPOCH, -36769829.696372844, -3.628171486580456e-07, 0.0002938635646789826,
                              drift_bound=1.0444898628027294e-13).as_dict())
    assert "-36769829.696," in text and "-3.62817149e-07" in text and "0.0002939" in text and "1.045e-13" in text
    assert Mapping.from_dict(Mapping(EPOCH, 0.0, 0.0, float("inf"), False).as_dict()).uncertainty_ns == float("inf")


def _loaded_fleet_maps(monkeypatch, weight_bound_ns: float) -> tuple[dict, dict]:
    """Four hosts probing one another; every edge of h02 is off, each by its own amount within
    a bound of 9 us (too little to flag h02, enough to bend the others), the rest exact."""
    monkeypatch.setattr(solver_module, "WEIGHT_BOUND_NS", weight_bound_ns)
    clocks = make_fleet(4, seed=11)
    peers = probe_peers(list(clocks), 3, seed=0)
    rng = np.random.default_rng(3)
    solver = Solver(list(clocks), "h00")
    for h in clocks:
        center = clocks[h].read(NOW_TAU - 1e9)
        rows = []
        for p in peers[h]:
            if "h02" in (h, p):
                row = edge_row(clocks, h, p, center, margin=9_000.0, drift_bound=2e-6)
                row[1] += float(rng.uniform(-7_000, 7_000))
                row[2] += float(rng.uniform(-1.5e-6, 1.5e-6))
            else:
                row = edge_row(clocks, h, p, center, margin=300.0, drift_bound=5e-8)
            rows.append(row)
        solver.on_report({"t": "report", "host": h, "edges": rows}, now=0.0)
    return clocks, solver.solve(clocks["h00"].read(NOW_TAU), now=0.5)


def _error_and_bound(clocks, msgs, h: str) -> tuple[float, float]:
    m = Mapping.from_dict(msgs[h]["hosts"][h])
    local = clocks[h].read(NOW_TAU + 1e9)
    return abs(m.global_ns(local) - clocks["h00"].read(NOW_TAU + 1e9)), m.bound_at(local)


def test_a_loose_host_does_not_pull_the_quiet_ones(monkeypatch):
    clocks, msgs = _loaded_fleet_maps(monkeypatch, solver_module.WEIGHT_BOUND_NS)
    assert "h02" not in msgs["h00"]["unsynced"]
    assert all(valid_map(m, clocks) for m in msgs.values())
    for h in ("h01", "h02", "h03"):
        error, bound = _error_and_bound(clocks, msgs, h)
        assert error <= bound, (h, error, bound)
        if h != "h02":
            assert error <= 300.0, (h, error)
    # weighed by points alone, the loose edges bend the quiet hosts by microseconds
    clocks, msgs = _loaded_fleet_maps(monkeypatch, math.inf)
    assert max(_error_and_bound(clocks, msgs, h)[0] for h in ("h01", "h03")) > 300.0
