"""The solve moves on when the solving agent falls silent: the succession (AgentConfig), each
host's election (agent/services/clock.py), and global time carried on by the next solver from
the last frame (Solver.resume), on generated fleets and a service fed messages by hand."""

from __future__ import annotations

import json
import time

import pytest

from clockfabric.agent.config import AgentConfig
from clockfabric.agent.service import Router
from clockfabric.agent.services.clock import ClockSync
from clockfabric.clock.solver import Solver
from clockfabric.errors import ClockfabricError
from clockfabric.topology import leafspine
from tests.unit.test_clock_fast_start import as_sent
from tests.unit.test_clock_sync import NOW_TAU
from tests.unit.test_clock_timescale import MOVE_NS, Fleet
from tests.unit.test_fuzz_datagrams import control_context


def test_the_next_solver_carries_global_time_on_from_the_last_frame():
    fleet = Fleet(n=12)
    for k in range(6):
        fleet.round(float(k))
    heard = fleet.solver.frame
    assert "h00" in heard.shares()
    before = len(fleet.frames)

    # the reference's agent dies: the next host solves from here, its first solve without it
    fresh, resumed = Solver(list(fleet.clocks), "h00"), Solver(list(fleet.clocks), "h00")
    assert resumed.resume(heard) and not resumed.resume(heard)  # a frame no newer changes nothing
    fleet.solver = fresh
    fleet.round(6.0, silent=["h00"])
    stepped = abs(fleet.global_time(-1, NOW_TAU) - fleet.global_time(before - 1, NOW_TAU))
    fleet.frames.pop()
    fleet.solver = resumed
    for k in range(6, 14):
        msgs = fleet.round(float(k), silent=["h00"])
    # a solver that starts afresh restarts global time on its members' mean: a step that the
    # frames' continuity exists to prevent
    assert stepped > 10 * MOVE_NS, stepped
    assert max(fleet.moves()) <= MOVE_NS
    assert abs(fleet.global_time(-1, NOW_TAU) - fleet.global_time(0, NOW_TAU)) <= 200
    assert "h00" not in fleet.solver.frame.shares()
    assert all(msgs[h]["hosts"][h]["synced"] for h in msgs)


def test_a_frame_naming_no_host_of_the_fleet_resumes_nothing():
    fleet = Fleet(n=4)
    fleet.round(0.0)
    other = Solver(["x1", "x2"], "x1")
    assert not other.resume(fleet.solver.frame) and other.last is None


def test_the_succession_is_the_reference_then_the_solvers_named_or_every_host():
    topo = leafspine(4, 2, 2)
    assert AgentConfig("h2", topo, "/nonexistent", insecure=True).succession == ("h0", "h1", "h2", "h3")
    named = AgentConfig("h2", topo, "/nonexistent", insecure=True, reference="h1", solvers=("h3", "h1", "h0"))
    assert named.succession == ("h1", "h3", "h0")
    with pytest.raises(ClockfabricError, match="--solvers: 'h9' is not a host"):
        AgentConfig("h2", topo, "/nonexistent", insecure=True, solvers=("h9",))


def _map(frame_t0: int, host: str, offset_ns: float = 0.0) -> bytes:
    mapping = {"t0_ns": frame_t0, "offset_ns": offset_ns, "drift": 0.0, "uncertainty_ns": 100.0, "drift_bound": 1e-8}
    frame = {"t0_ns": frame_t0, "members": [["h0", 0.5, 0.0, 0.0], ["h3", 0.5, 10.0, 0.0]]}
    return json.dumps({"t": "map", "hosts": {host: mapping}, "frame": frame}).encode()


def _clock(host: str):
    ctx, rejected = control_context(host)  # h0..h3, h0 the reference
    sent: list[tuple[str, dict]] = []
    ctx.send = lambda h, m: sent.append((h, as_sent(m)))
    clock = ClockSync(ctx)
    return clock, Router([clock]), ctx, rejected, sent


def test_a_host_moves_to_the_next_solver_once_its_own_falls_silent_and_back_when_it_answers():
    clock, router, ctx, rejected, sent = _clock("h2")
    now = time.monotonic()
    clock._elect(now + 100)  # no map yet: a starting fleet waits for its solver
    assert clock.elected == 0 and not sent
    router.deliver(_map(1, "h2"), (ctx.addresses["h0"], 7299))
    assert clock.sync.mapping is not None and clock.elected == 0
    clock._elect(time.monotonic() + clock.handover_s / 2)
    assert clock.elected == 0
    clock._elect(time.monotonic() + clock.handover_s + 0.1)
    # it reports to the next host, and still to the reference, whose maps may only have been lost
    assert clock.elected == 1 and [h for h, m in sent if m["t"] == "report"] == ["h0", "h1"]
    router.deliver(_map(2, "h2"), (ctx.addresses["h3"], 7299))  # after ours in the succession
    assert rejected["not_solver"] == 1 and clock.sync.mapping.t0_ns == 1
    router.deliver(_map(3, "h2"), (ctx.addresses["h1"], 7299))
    assert clock.sync.mapping.t0_ns == 3 and clock.report()["solver_host"] == "h1"
    # the reference back afresh (its agent restarted): global time 1 ms away, refused
    router.deliver(_map(4, "h2", offset_ns=1e6), (ctx.addresses["h0"], 7299))
    assert rejected["not_solver"] == 2 and clock.elected == 1 and clock.sync.mapping.t0_ns == 3
    malformed = json.dumps({"t": "map", "hosts": ["h2"], "frame": None}).encode()
    router.deliver(malformed, (ctx.addresses["h0"], 7299))
    assert rejected["invalid"] == 1 and clock.elected == 1
    router.deliver(_map(5, "h2"), (ctx.addresses["h0"], 7299))  # its maps had been lost: taken back
    assert clock.elected == 0 and clock.sync.mapping.t0_ns == 5


def test_the_next_host_takes_over_the_solve_from_the_frame_it_heard():
    clock, router, ctx, _, sent = _clock("h1")
    assert clock.solver is None and not clock.solving
    router.deliver(_map(5, "h1"), (ctx.addresses["h0"], 7299))
    clock._elect(time.monotonic() + clock.handover_s + 0.1)
    assert clock.elected == 1 and "h1" in [h for h, m in sent if m["t"] == "report"]  # to itself, as the reference
    assert clock.solver.frame is not None and clock.solver.frame.t0_ns == 5  # carried on, not afresh
    # it solves once more than half the fleet (3 of 4) names it: alone, cut off by its own
    # congested link, it would solve for itself and whoever followed it
    for host, quorum in (("h2", False), ("h3", False), ("h1", True)):
        report = {"t": "report", "host": host, "edges": [], "solver": "h1"}
        router.deliver(json.dumps(report).encode(), (ctx.addresses[host], 7299))
        assert clock.solving == quorum, host


def test_a_solver_no_live_peer_reports_to_moves_on():
    clock, router, ctx, _, sent = _clock("h0")
    assert clock.solving
    later = time.monotonic() + clock.handover_s + 0.1
    clock._exchanged = later  # its peers answer probes ...
    clock._elect(later)  # ... but report elsewhere: it was restarted, or cut off
    assert clock.elected == 1 and not clock.solving and sent[-1][0] == "h1"
    # a starting reference whose peers report to it keeps the solve; one whose peers' reports
    # name another solver (it restarted while that one took over) moves on
    for named, keeps in ((None, True), ("h0", True), ("h1", False)):
        clock, router, ctx, _, _ = _clock("h0")
        report = {"t": "report", "host": "h2", "edges": []} | ({"solver": named} if named else {})
        router.deliver(json.dumps(report).encode(), (ctx.addresses["h2"], 7299))
        later = time.monotonic() + clock.handover_s / 2
        clock._solving_since = clock._solving_since - clock.handover_s
        clock._exchanged = later
        clock._elect(later)
        assert clock.solving == keeps, named
