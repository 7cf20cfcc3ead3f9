"""Convergence after an agent starts: the fast start of agent/services/clock.py (a faster probe
rate, a report every START_REPORT_S, the solver answering a starting host at once, each map
published)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import clockfabric.agent.services.clock as clock_service
from clockfabric.agent.config import AgentConfig
from clockfabric.agent.services.clock import (
    MAP_SPREAD,
    START_REPORT_S,
    START_SOLVE_S,
    START_WINDOWS,
    TAKE_QUIET_S,
    TAKE_S,
    ClockSync,
)
from clockfabric.clock.graph import probe_peers
from clockfabric.clock.mapping import Mapping
from clockfabric.topology import leafspine
from tests.unit.test_clock_sync import EPOCH, NOW_TAU, Host, edge_row, make_fleet


class Clock:
    """time.monotonic for the service under test, moved by hand."""

    def __init__(self):
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


def as_sent(msg: dict | str) -> dict:
    """A control message as its receiver reads it (the agent sends a dict, or its JSON already)."""
    return json.loads(msg) if isinstance(msg, str) else msg


@pytest.fixture
def mono(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(clock_service, "time", SimpleNamespace(monotonic=clock.monotonic))
    return clock


def service(host: str, fleet: dict[str, Host]) -> tuple[ClockSync, list, list]:
    """A clock service on `host` of a 12-host fabric, its sends and publishes recorded."""
    cfg = AgentConfig(host, leafspine(12, 2, 2, host_rate="100gbit"), "/nonexistent", peers=4)
    sent: list[tuple[str, dict]] = []
    published: list[int] = []
    addresses = {f"10.0.0.{i}": h for i, h in enumerate(sorted(cfg.topology.hosts))}
    engine = SimpleNamespace(interval_s=cfg.probe_interval_s(), exchanges=[], names=addresses)
    ctx = SimpleNamespace(cfg=cfg, engine=engine, time_source=None, send=lambda h, msg: sent.append((h, as_sent(msg))),
                          publish=lambda: published.append(1),
                          clock=SimpleNamespace(now_ns=lambda: fleet[host].read(NOW_TAU), set_ns=lambda: 0))
    return ClockSync(ctx), sent, published


def address(svc: ClockSync, host: str) -> tuple[str, int]:
    return next(a for a, h in svc.ctx.engine.names.items() if h == host), 7400


def fleet12() -> dict[str, Host]:
    return {f"h{i}": c for i, c in enumerate(make_fleet(12, seed=3).values())}


def report_all(ref: ClockSync, fleet: dict[str, Host], starting: str | None = None) -> None:
    """Every host's report of its pairs reaches the solver; `starting`'s asks to be answered soon."""
    peers = probe_peers(sorted(fleet), 4, seed=0)
    center = {h: fleet[h].read(NOW_TAU - 1e9) for h in fleet}
    for h in sorted(fleet):
        edges = [edge_row(fleet, h, p, center[h], margin=1_000.0) for p in peers[h]]
        ref.on_message({"t": "report", "host": h, "edges": edges, **({"start": True} if h == starting else {})},
                       address(ref, h))


def test_a_starting_agent_probes_faster_and_reports_often_then_keeps_the_update_cadence(mono):
    svc, sent, _ = service("h1", fleet12())
    full = svc.ctx.engine.interval_s
    svc.start()
    assert svc.hurried and svc.ctx.engine.interval_s == pytest.approx(full / 2)
    due = svc.poll(mono.now)
    assert [m["start"] for _, m in sent] == [True] and due == pytest.approx(mono.now + START_REPORT_S)
    svc.poll(mono.now + 0.1)
    assert len(sent) == 1  # not again before START_REPORT_S
    mono.now += START_REPORT_S
    svc.poll(mono.now)
    assert len(sent) == 2
    mono.now += START_WINDOWS * svc.ctx.cfg.window_s
    assert not svc.hurried
    # reports wait for the update again; the probe engine's exchanges are taken every TAKE_S
    assert svc.poll(mono.now) == pytest.approx(mono.now + TAKE_S) and len(sent) == 2
    svc.tick(0)
    assert svc.ctx.engine.interval_s == pytest.approx(full) and "start" not in sent[-1][1]


def test_a_settled_clocks_exchanges_wait_longer_for_the_pairs(mono):
    """The loop wakes for the probe engine's exchanges every TAKE_S, and every TAKE_QUIET_S once
    the clock is settled and the fabric quiet: an idle agent's wake-ups are mostly these."""
    svc, _, _ = service("h1", fleet12())
    svc.start()
    mono.now += START_WINDOWS * svc.ctx.cfg.window_s
    svc.tick(0)
    assert not svc.quiet and svc.poll(mono.now) == pytest.approx(mono.now + TAKE_S)
    svc.sync.settled = lambda now_ns: True  # type: ignore[method-assign]
    svc.tick(0)
    assert svc.quiet and svc.poll(mono.now) == pytest.approx(mono.now + TAKE_QUIET_S)
    svc.sync.unsure = lambda: True  # type: ignore[method-assign]  # a band broke: hurried, reporting often
    assert svc.poll(mono.now) == pytest.approx(mono.now + START_REPORT_S) and svc.hurried


def test_a_starting_host_publishes_each_map_and_a_started_one_waits_for_its_update(mono):
    fleet = fleet12()
    svc, _, published = service("h1", fleet)
    svc.start()
    ref = address(svc, "h0")
    msg = {"t": "map", "hosts": {"h1": Mapping(EPOCH, 0.0, 0.0, 100.0).as_dict()}}
    svc.on_message(msg, ref)
    assert len(published) == 1 and svc.sync.mapping is not None
    mono.now += START_WINDOWS * svc.ctx.cfg.window_s
    svc.on_message(msg, ref)
    assert len(published) == 1


def test_the_solver_answers_a_starting_hosts_report_at_once_and_to_it_alone(mono):
    fleet = fleet12()
    ref, sent, _ = service("h0", fleet)
    report_all(ref, fleet, starting="h5")
    assert ref.poll(mono.now) == pytest.approx(mono.now + START_SOLVE_S)  # a solve is due soon
    assert sent == []
    mono.now += START_SOLVE_S
    ref.poll(mono.now)
    maps = [(h, m) for h, m in sent if m["t"] == "map"]
    assert [h for h, _ in maps] == ["h5"] and maps[0][1]["hosts"]["h5"]["synced"]
    assert "urgent" not in maps[0][1]
    assert ref.poll(mono.now + 1) == pytest.approx(mono.now + 1 + TAKE_S)  # answered: nothing more due


def test_a_broken_band_hurries_a_started_agent_for_as_long_as_a_start(mono):
    """A pair that broke its band (a clock stepped or changed rate) has few points, as at a
    start: the agent probes faster and reports often again, for START_WINDOWS windows after the
    last pair was unsure."""
    svc, sent, _ = service("h1", fleet12())
    full = svc.ctx.engine.interval_s
    svc.start()
    mono.now += START_WINDOWS * svc.ctx.cfg.window_s
    svc.tick(0)
    assert not svc.hurried and svc.ctx.engine.interval_s == pytest.approx(full)
    svc.sync.unsure = lambda: True  # type: ignore[method-assign]
    svc.poll(mono.now)
    assert svc.hurried and svc.ctx.engine.interval_s == pytest.approx(full / 2)
    assert svc.poll(mono.now) == pytest.approx(mono.now + START_REPORT_S) and sent[-1][1]["start"] is True
    svc.sync.unsure = lambda: False  # type: ignore[method-assign]
    mono.now += START_WINDOWS * svc.ctx.cfg.window_s - 0.1
    assert svc.hurried
    mono.now += 0.2
    assert not svc.hurried
    svc.tick(0)
    assert svc.ctx.engine.interval_s == pytest.approx(full) and "start" not in sent[-1][1]


def test_the_solvers_maps_leave_spread_over_a_share_of_the_update_none_lost(mono):
    """After a solve, one map a host leaves every MAP_SPREAD * update / (hosts - 1): a burst of
    them all would overflow a busy link's queue, and always at the same hosts (agent.fanout)."""
    fleet = fleet12()
    ref, sent, _ = service("h0", fleet)
    report_all(ref, fleet)
    ref.tick(0)
    gap = MAP_SPREAD * ref.ctx.cfg.update_s / 11
    assert len([m for _, m in sent if m["t"] == "map"]) == 1  # the first at once
    times = [mono.now]
    while (due := ref.poll(mono.now)) != pytest.approx(mono.now + TAKE_S):  # until only the exchanges' take
        assert due == pytest.approx(mono.now + gap) or due == pytest.approx(mono.now)
        mono.now = due
        times.append(due)
    maps = [h for h, m in sent if m["t"] == "map"]
    assert sorted(maps) == sorted(fleet) and len(set(maps)) == 12
    assert mono.now - times[0] == pytest.approx(11 * gap)


def test_a_host_that_could_solve_but_does_not_keeps_its_loop_asleep(mono):
    """The reference keeps the reports of the hosts (a takeover starts with them) while another
    host solves: a starting host's report must not make it ask for a poll at a time long past."""
    fleet = fleet12()
    ref, sent, _ = service("h0", fleet)
    report_all(ref, fleet, starting="h5")  # made its solver; then the solve moved on
    ref.elected = 1
    assert not ref.solving
    report_all(ref, fleet, starting="h5")
    mono.now += 10 * START_SOLVE_S
    assert ref.poll(mono.now) > mono.now
    assert not any(m["t"] == "map" for _, m in sent)  # and solves nothing for the fleet


def test_a_clock_that_says_it_was_set_puts_the_host_in_doubt_and_a_hurry_at_the_next_poll(mono):
    fleet = fleet12()
    svc, _, published = service("h1", fleet)
    set_by = [0]
    svc.ctx.clock.set_ns = lambda: set_by[0]
    svc.sync.mapping = Mapping(EPOCH, 0.0, 0.0, 50.0)
    mono.now += 10.0  # long past any start-up hurry
    svc.poll(mono.now)
    set_by[0] = clock_service.SET_SEEN_NS // 2  # a read's jitter, or a step a fit absorbs
    svc.poll(mono.now)
    assert not svc.sync.doubted and not svc.hurried and not published
    set_by[0] += 50_000_000
    svc.poll(mono.now)
    assert svc.sync.doubted and svc.hurried and published
    assert svc.sync.mapping.uncertainty_ns >= 50_000_000 + 50.0


def test_only_a_message_that_moves_the_clocks_next_poll_sooner_asks_for_one(mono):
    """A plain report (each host's, once an update, at the solver) and a map change nothing the
    service's next poll would do sooner: the loop is not woken for them. A starting host's report,
    a stepped clock's, and a neighbour's step are."""
    fleet = fleet12()
    ref, _, _ = service("h0", fleet)
    mono.now += 10.0
    ref.poll(mono.now)
    plain = {"t": "report", "host": "h3", "edges": []}
    assert ref.on_message(plain, address(ref, "h3")) is False
    assert ref.on_message({**plain, "host": "h5", "start": True}, address(ref, "h5")) is not False
    assert ref.on_message({**plain, "host": "h7", "urgent": True}, address(ref, "h7")) is not False
    svc, _, _ = service("h1", fleet)
    svc.poll(mono.now)
    msg = {"t": "map", "hosts": {"h1": Mapping(EPOCH, 0.0, 0.0, 100.0).as_dict()}}
    assert svc.on_message(msg, address(svc, "h0")) is False and svc.sync.mapping is not None
    assert svc.on_message({"t": "stepped", "delta_ns": 1e6}, address(svc, "h2")) is not False
