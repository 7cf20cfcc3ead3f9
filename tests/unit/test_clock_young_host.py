"""The solver's patience with a young host (clock/solver.py): a starting agent's first fits are
wide for its start-up alone, so it is left out of one solve at a time, not held out for
FLAG_HOLD_S as a host queued on every path is."""

from __future__ import annotations

from clockfabric.clock.graph import probe_peers
from clockfabric.clock.solver import FLAG_HOLD_S, Solver
from tests.unit.test_clock_sync import NOW_TAU, edge_row, make_fleet


def _reports(clocks, peers, wide: str) -> list[dict]:
    center = {h: clocks[h].read(NOW_TAU - 1e9) for h in clocks}
    return [{"t": "report", "host": h,
             "edges": [edge_row(clocks, h, p, center[h], margin=80_000.0 if wide in (h, p) else 1_000.0)
                       for p in peers[h]]} for h in clocks]


def test_a_young_hosts_wide_bands_leave_it_out_of_one_solve_not_for_the_hold():
    clocks = make_fleet(8, seed=5)
    peers = probe_peers(list(clocks), 3, seed=5)
    solver = Solver(list(clocks), "h00", young_s=4.0)
    t0 = clocks["h00"].read(NOW_TAU)
    for msg in _reports(clocks, peers, wide="h05"):
        solver.on_report(msg, now=0.0)
    first = solver.solve(t0, now=0.5)
    assert first["h05"]["hosts"]["h05"]["synced"] is False  # not in this solve: its bands are wide
    for msg in _reports(clocks, peers, wide="none"):  # its next fits are narrow
        solver.on_report(msg, now=1.0)
    assert solver.solve(t0, now=1.5)["h05"]["hosts"]["h05"]["synced"]


def test_a_host_reporting_for_a_while_is_held_out_once_its_bands_widen():
    clocks = make_fleet(8, seed=5)
    peers = probe_peers(list(clocks), 3, seed=5)
    solver = Solver(list(clocks), "h00", young_s=4.0)
    t0 = clocks["h00"].read(NOW_TAU)
    for now in (0.0, 2.0, 4.0):
        for msg in _reports(clocks, peers, wide="none"):
            solver.on_report(msg, now=now)
    for msg in _reports(clocks, peers, wide="h05"):
        solver.on_report(msg, now=5.0)
    assert solver.solve(t0, now=5.0)["h05"]["hosts"]["h05"]["synced"] is False
    for msg in _reports(clocks, peers, wide="none"):  # a lull: narrow again, but still held
        solver.on_report(msg, now=6.0)
    assert solver.solve(t0, now=6.0)["h05"]["hosts"]["h05"]["synced"] is False
    for msg in _reports(clocks, peers, wide="none"):
        solver.on_report(msg, now=5.0 + FLAG_HOLD_S + 0.5)
    assert solver.solve(t0, now=5.0 + FLAG_HOLD_S + 0.5)["h05"]["hosts"]["h05"]["synced"]


def test_a_host_back_after_going_stale_is_young_again():
    clocks = make_fleet(8, seed=5)
    peers = probe_peers(list(clocks), 3, seed=5)
    solver = Solver(list(clocks), "h00", stale_s=3.0, young_s=4.0)
    for msg in _reports(clocks, peers, wide="none"):
        solver.on_report(msg, now=0.0)
    assert solver.since["h05"] == 0.0
    solver.on_report(_reports(clocks, peers, wide="none")[5], now=2.0)
    assert solver.since["h05"] == 0.0  # reporting on
    solver.on_report(_reports(clocks, peers, wide="none")[5], now=10.0)
    assert solver.since["h05"] == 10.0  # silent past stale_s: starting over
