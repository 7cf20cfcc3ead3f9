"""The honest side of clock sync: the queued-host flag and holdover (clock/health.py), the
solver leaving a queued host (or reference) out without a step in global time, the bound
covering generated loaded traces, and one-way delays that a loose bound makes untrusted."""

from __future__ import annotations

import numpy as np

from clockfabric.clock.graph import probe_peers
from clockfabric.clock.health import HOLDOVER_MAX_NS, BandBaseline, asymmetric_hosts, hold_over
from clockfabric.clock.mapping import DRIFT_BOUND, HOLDOVER, UNSYNCED, Mapping
from clockfabric.clock.pairs import PairWindow
from clockfabric.clock.solver import Solver
from clockfabric.clock.sync import HostSync
from tests.unit.test_clock_sync import EPOCH, NOW_TAU, edge_row, make_fleet
from tests.unit.test_pair_window import FLOOR_NS, TrueClock, feed, make_exchange, stream, theta


def test_a_host_whose_every_band_is_wide_is_named_and_others_are_not():
    margins = {"a": [1_000.0, 2_000.0], "b": [1_500.0, 40_000.0], "c": [900.0], "d": [45_000.0, 60_000.0]}
    flagged = asymmetric_hosts(margins)
    assert set(flagged) == {"d"} and flagged["d"].startswith("asymmetric")
    assert asymmetric_hosts({"a": [1e3], "b": [1e6]}) == {}  # two hosts: no fleet to compare with


def test_hold_over_keeps_the_last_good_mapping_then_gives_up():
    good = Mapping(EPOCH, 100.0, 1e-6, 50.0)
    lost = Mapping(EPOCH + 10**9, 0.0, 0.0, float("inf"), False, UNSYNCED, "asymmetric: queued")
    held = hold_over(good, lost, lost.t0_ns)
    assert held.state == HOLDOVER and held.offset_ns == 100.0 and held.reason == "asymmetric: queued"
    assert held.bound_at(EPOCH + 10**9) == 50.0 + DRIFT_BOUND * 1e9  # grows with the time held
    late = replace_t0(lost, EPOCH + HOLDOVER_MAX_NS + 1)
    assert hold_over(held, late, late.t0_ns).state == UNSYNCED
    assert hold_over(held, good, good.t0_ns) == good  # synced again: the new one


def replace_t0(m: Mapping, t0: int) -> Mapping:
    return Mapping(t0, m.offset_ns, m.drift, m.uncertainty_ns, m.synced, m.state, m.reason)


def _reports(clocks, peers, *, margin=lambda h, p: 1_000.0):
    center = {h: clocks[h].read(NOW_TAU - 1e9) for h in clocks}
    return {h: {"t": "report", "host": h,
                "edges": [edge_row(clocks, h, p, center[h], margin=margin(h, p)) for p in peers[h]]} for h in clocks}


def test_the_solver_leaves_a_queued_host_out_and_names_it():
    clocks = make_fleet(8, seed=5)
    peers = probe_peers(list(clocks), 3, seed=5)
    solver = Solver(list(clocks), "h00")
    for msg in _reports(clocks, peers, margin=lambda h, p: 80_000.0 if "h05" in (h, p) else 1_000.0).values():
        solver.on_report(msg, now=0.0)
    msgs = solver.solve(clocks["h00"].read(NOW_TAU), now=0.5)
    mine = msgs["h05"]["hosts"]["h05"]
    assert mine["synced"] is False and mine["reason"].startswith("asymmetric")
    assert "h05" in msgs["h00"]["unsynced"]
    others = [msgs[h]["hosts"][h] for h in clocks if h != "h05"]
    assert all(m["synced"] and m["uncertainty_ns"] < 10_000 for m in others)


def _solved(seed: int):
    """An 8-host fleet, 3 peers each, whose reports came in and were solved once at t0."""
    clocks = make_fleet(8, seed=seed)
    peers = probe_peers(list(clocks), 3, seed=seed)
    solver = Solver(list(clocks), "h00")
    t0 = clocks["h00"].read(NOW_TAU)
    for msg in _reports(clocks, peers).values():
        solver.on_report(msg, now=0.0)
    return clocks, peers, solver, t0, solver.solve(t0, now=0.5)


def test_a_host_whose_every_band_widened_alike_has_its_bound_grow_to_cover_its_offset():
    """A queue building on a host's own link widens each of its pairs' bands and moves each one's
    middle line alike, by up to the widening: no loop shows it, and until the band stands out
    from the fleet's (asymmetric_hosts) the host is still solved, off by that much. Its bound
    grows by its edges' median widening; a host most of whose edges did not widen keeps its own."""
    clocks, peers, solver, t0, before = _solved(seed=7)
    shift = 3_000.0  # each middle line moves by this, each band widens by as much (a one-sided queue)
    queued = _reports(clocks, peers, margin=lambda h, p: 1_000.0 + shift if "h05" in (h, p) else 1_000.0)
    for msg in queued.values():
        for edge in msg["edges"]:  # [peer, a, ...]: a is the peer's clock less the reporter's
            edge[1] += -shift if msg["host"] == "h05" else shift if edge[0] == "h05" else 0.0
        solver.on_report(msg, now=1.0)
    after = solver.solve(t0, now=1.5)
    old, new = before["h05"]["hosts"]["h05"], after["h05"]["hosts"]["h05"]
    moved = abs(new["offset_ns"] - old["offset_ns"])
    assert new["synced"] and moved > shift / 2  # still solved, and that far off
    assert old["uncertainty_ns"] < moved <= new["uncertainty_ns"]
    edges = [(h, p) for h in clocks for p in peers[h]]
    beside = {h for h in clocks if 2 * sum("h05" in e for e in edges if h in e) < sum(h in e for e in edges)}
    assert len(beside) >= 5
    for h in beside:
        assert after[h]["hosts"][h]["uncertainty_ns"] < before[h]["hosts"][h]["uncertainty_ns"] + 100


def test_a_host_held_over_from_a_mapping_a_building_queue_tilted_is_bounded_by_its_limits():
    """A queue building on a host's own link tilts every one of its pairs' slopes alike (each
    pair's feasible slopes still hold the truth): the solve takes the tilt, no loop shows it, and
    the statistical drift bound is as narrow as ever. Named a moment later, the host holds over
    that mapping for up to a minute, where the tilt is milliseconds: its limits must bound it."""
    clocks, peers, solver, t0, before = _solved(seed=7)
    tilt, feasible = 20e-6, 50e-6
    center = {h: clocks[h].read(NOW_TAU - 1e9) for h in clocks}
    for h in clocks:
        edges = []
        for p in peers[h]:
            queued = "h05" in (h, p)
            edge = edge_row(clocks, h, p, center[h], margin=4_000.0 if queued else 1_000.0,
                            drift_bound=feasible if queued else DRIFT_BOUND)
            edge[2] += -tilt if h == "h05" else tilt if p == "h05" else 0.0  # h05's clock looks fast
            edges.append(edge)
        solver.on_report({"t": "report", "host": h, "edges": edges}, now=1.0)
    tilted = Mapping.from_dict(solver.solve(t0, now=1.5)["h05"]["hosts"]["h05"])
    truth = Mapping.from_dict(before["h05"]["hosts"]["h05"])
    assert tilted.synced and abs(tilted.drift - truth.drift) > tilt / 2
    assert tilted.drift_bound < tilt / 2  # the loops did not see it
    for msg in _reports(clocks, peers, margin=lambda h, p: 80_000.0 if "h05" in (h, p) else 1_000.0).values():
        solver.on_report(msg, now=2.0)
    named = Mapping.from_dict(solver.solve(t0 + 10**9, now=2.5)["h05"]["hosts"]["h05"])
    held = hold_over(tilted, named, named.t0_ns)
    assert held is not None and held.state == HOLDOVER
    for after_s in (1, 10, 30, 59):
        local = t0 + after_s * 10**9
        error = abs(held.global_ns(local) - truth.global_ns(local))
        assert error > tilted.bound_at(local)  # what it served before it was named
        assert error <= held.bound_at(local), (after_s, error, held.bound_at(local))


def test_a_band_is_judged_against_its_usual_one_and_pairs_no_longer_reported_are_forgotten():
    baseline = BandBaseline()
    for t in range(60):  # a start-up's wide bands narrow to 1 us, jittering
        widened = baseline.widened({("a", "b"): 1_000.0 + 20_000.0 * 0.5 ** t + 50 * (t % 2),
                                    ("a", "c"): 1_000.0, ("b", "c"): 1_000.0}, now=float(t))
    assert max(widened.values()) <= 50  # the start-up's bands are not the usual ones, the jitter is
    queued = baseline.widened({("a", "b"): 5_000.0, ("a", "c"): 5_000.0, ("b", "c"): 1_000.0}, now=60.0)
    assert queued["a"] >= 3_900  # every pair of a's widened by 4 us
    assert queued["b"] <= 2_050 and queued["c"] <= 2_000  # one pair of their two
    baseline.widened({("b", "c"): 1_000.0}, now=400.0)
    assert set(baseline._usual) == {("b", "c")}  # the others, unseen for minutes, are forgotten


def test_a_queued_reference_leaves_the_ensemble_without_a_step():
    clocks, peers, solver, t0, before = _solved(seed=6)
    for msg in _reports(clocks, peers, margin=lambda h, p: 80_000.0 if "h00" in (h, p) else 1_000.0).values():
        solver.on_report(msg, now=1.0)
    after = solver.solve(t0, now=1.5)
    assert solver.frame is not None and "h00" not in solver.frame.shares()
    assert after["h01"]["frame"] == solver.frame.as_dict()
    for h in clocks:
        if h == "h00":
            continue
        old, new = before[h]["hosts"][h], after[h]["hosts"][h]
        assert new["synced"]
        assert abs(new["offset_ns"] - old["offset_ns"]) < 1.0  # global time did not move
        assert abs(new["drift"] - old["drift"]) < 1e-12
        # relative to the ensemble: nothing of h00's old tie adds
        assert new["uncertainty_ns"] < 10_000


def test_the_pair_bound_covers_a_one_sided_standing_queue():
    """Every reverse packet waits behind a standing queue (pure: it barely changes within a
    pair): no loop can see it, and the fit is off by half of it, but never beyond its bound."""
    ours, peer = TrueClock(0.0, 0.0), TrueClock(3e6, 20e-6)
    rng = np.random.default_rng(2)
    w = PairWindow("b")
    probes = []
    for k in range(3000):
        tau = k * 2e6
        q = 200_000 + 50_000 * np.sin(k / 200)  # TCP's sawtooth, slowly
        j = rng.uniform(0, 200, 2)
        probes.append(type("P", (), {"ex": make_exchange(ours, peer, tau, fwd=(FLOOR_NS + j[0],) * 2,
                                                          rev=(FLOOR_NS + q + j[1],) * 2)})())
    errors = feed(w, probes, ours=ours, peer=peer)
    assert abs(errors[-1][1]) > 50_000  # really off
    fit = w.fit
    assert abs(fit.offset_ns - theta(ours, peer, fit.center_ns)) <= fit.bound_ns()


def test_the_window_widens_when_pure_points_are_scarce():
    ours, peer = TrueClock(0.0, 0.0), TrueClock(5e5, -10e-6)
    w = PairWindow("b")
    # every forward pair but one a second queued: two pure ones in a 2 s window
    feed(w, stream(ours, peer, 12.0, queued=0.0, fwd_pure_every=500, seed=4))
    fit = w.refit(w.exchanges[-1].rx[1])
    assert fit.n_fwd >= 3 and fit.reach_ns > w.window_ns / 2  # from more than one window
    assert abs(fit.offset_ns - theta(ours, peer, fit.center_ns)) <= fit.bound_ns()


def test_a_window_of_few_pure_points_widens_until_its_floors_have_eight():
    """Four pure forward points in a window are four late stamps on a busy host, not a floor:
    the window doubles, and its fit holds eight or more."""
    ours, peer = TrueClock(0.0, 0.0), TrueClock(5e5, -10e-6)
    w = PairWindow("b")
    feed(w, stream(ours, peer, 12.0, queued=0.0, fwd_pure_every=250, seed=5))
    fit = w.refit(w.exchanges[-1].rx[1])
    assert fit.n_fwd >= 8 and fit.reach_ns > w.window_ns * 0.9  # two windows, not one
    assert abs(fit.offset_ns - theta(ours, peer, fit.center_ns)) <= fit.bound_ns()


def test_an_owd_read_by_an_unsynced_or_loose_clock_is_untrusted():
    sync = HostSync("a", ["b"], owd_trust_ns=10_000.0)
    sync.add([make_exchange(TrueClock(), TrueClock(), 1e6 * k, name="b") for k in range(5)])
    sync.on_map({"hosts": {"a": Mapping(EPOCH, 0.0, 0.0, 100.0).as_dict(),
                           "b": Mapping(EPOCH, 0.0, 0.0, 200.0).as_dict()}})
    [row] = [r for r in sync.owd() if r["src"] == "a"]
    assert row["trusted"] and row["bound_ns"] >= 300.0 and "p50_ns" in row
    sync.on_map({"hosts": {"a": Mapping(EPOCH, 0.0, 0.0, 100.0).as_dict(),
                           "b": Mapping(EPOCH, 0.0, 0.0, float("inf"), False, UNSYNCED, "asymmetric").as_dict()}})
    state = sync.state()
    assert state["owd"] == [] and all("p50_ns" not in r for r in state["owd_untrusted"])
    assert "asymmetric" in state["owd_untrusted"][0]["reason"]
    sync.on_map({"hosts": {"a": Mapping(EPOCH, 0.0, 0.0, 100.0).as_dict(),
                           "b": Mapping(EPOCH, 0.0, 0.0, 50_000.0).as_dict()}})
    assert not any(r["trusted"] for r in sync.owd())


def test_a_direction_left_without_pure_points_gives_no_fit_within_ten_seconds():
    """A FIFO full of bulk packets spaces every reverse probe pair apart from the load's start
    on: the pair must stop vouching for the offset within 10 s (so its host is named), not
    keep a fit of the points before the load until they leave the drift history."""
    ours, peer = TrueClock(0.0, 0.0), TrueClock(2e6, 10e-6)
    load_s = 12.0
    clean = stream(ours, peer, load_s, queued=0.0, seed=8)
    rng = np.random.default_rng(9)
    loaded = []
    for k in range(int(10e9 / 2e6)):
        tau = load_s * 1e9 + k * 2e6
        q = 100_000 + rng.exponential(20_000)
        loaded.append(type("P", (), {"ex": make_exchange(ours, peer, tau, rev=(FLOOR_NS + q, FLOOR_NS + q + 5_000))})())
    w = PairWindow("b")
    feed(w, clean)
    at = {s: next(p.ex.rx[1] for p in loaded if p.ex.tx[0] >= ours.read((load_s + s) * 1e9)) for s in (3.0, 8.0)}
    feed(w, [p for p in loaded if p.ex.rx[1] <= at[3.0]])
    assert w.refit(at[3.0]) is not None  # a short stretch: the drained moments before it still count
    feed(w, [p for p in loaded if at[3.0] < p.ex.rx[1] <= at[8.0]])
    assert w.refit(at[8.0]) is None
