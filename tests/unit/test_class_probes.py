"""The class stream: on a fabric with traffic classes, sparse probes marked with the jobs' class on
the clock's own paths. Their packets carry the class's DSCP alone, their exchanges never reach the
clock's pair fits, their delays are read beside the path's floor, and root cause takes them as
probes that wait where the job does: quiet ones clear the links they cross."""

from __future__ import annotations

import dataclasses
import socket
import time

import pytest

from clockfabric.agent.config import CLASS_PROBE_SHARE, AgentConfig
from clockfabric.clock.mapping import Mapping
from clockfabric.clock.sync import HostSync
from clockfabric.controller.rootcause import ProbePath, Thresholds
from clockfabric.controller.rootcause_fabric import Fabric, observations
from clockfabric.probe.engine import Exchange, Marking, ProbeEngine
from clockfabric.topology import TrafficClasses, leafspine

EPOCH = 1_700_000_000_000_000_000
WINDOW = 2_000_000_000


def _exchange(t: int, out_ns: int, path: str = "eth0:7300", dscp: int | None = None) -> Exchange:
    return Exchange("b", path, (t, t + 10_000), (t + out_ns, t + out_ns + 10_000),
                    (t + out_ns + 50_000, t + out_ns + 60_000), (t + 2 * out_ns + 50_000,) * 2, dscp)


def _synced() -> HostSync:
    sync = HostSync("a", ["b"], window_ns=WINDOW)
    sync.on_map({"hosts": {h: Mapping(EPOCH, 0.0, 0.0, 0.0).as_dict() for h in "ab"}})
    return sync


def test_class_exchanges_stay_out_of_the_clock_and_give_their_own_delays():
    sync = _synced()
    sync.add([_exchange(EPOCH + i * 100_000_000, 20_000) for i in range(5)])
    seen = sync.pairs["b"].seen
    sync.add([_exchange(EPOCH + i * 100_000_000, 900_000 + i, dscp=26) for i in range(5)])
    assert sync.pairs["b"].seen == seen  # the pair fit never saw them
    assert all(r["p50_ns"] == 20_000 for r in sync.owd() if r["src"] == "a")  # nor the clock's delays
    rows = sync.class_owd()
    assert [(r["src"], r["dst"], r["path"], r["dscp"], r["n"], r["p50_ns"]) for r in rows] == [
        ("a", "b", "eth0:7300", 26, 5, 900_002)]


def test_class_delays_age_out_with_the_clocks_exchanges():
    sync = _synced()
    sync.add([_exchange(EPOCH, 20_000), _exchange(EPOCH, 900_000, dscp=26)])
    assert sync.class_owd()
    later = EPOCH + WINDOW + 1
    sync.add([_exchange(later, 20_000)])
    assert sync.class_owd() == []  # no class exchange within the last windows: no delay, not an old one


def test_an_unsynced_peer_gives_no_class_delay():
    sync = HostSync("a", ["b"], window_ns=WINDOW)
    sync.on_map({"hosts": {"a": Mapping(EPOCH, 0.0, 0.0, 0.0).as_dict(),
                           "b": Mapping(EPOCH, 0.0, 0.0, 0.0, synced=False).as_dict()}})
    sync.add([_exchange(EPOCH, 20_000), _exchange(EPOCH, 900_000, dscp=26)])
    assert sync.class_owd() == []


def test_the_agent_probes_in_the_collective_class_only_where_the_fabric_has_classes(tmp_path):
    fifo = leafspine(2, 1, 0)
    assert AgentConfig("h0", fifo, tmp_path).probe_marking() == Marking(46)
    classes = dataclasses.replace(fifo, classes=TrafficClasses(collective_dscp=(24, 26)))
    cfg = AgentConfig("h0", classes, tmp_path)
    assert cfg.probe_marking() == Marking(46, 24, pytest.approx(cfg.probe_interval_s() / CLASS_PROBE_SHARE))


def _tos_of_datagrams(port: int, seconds: float) -> list[int]:
    """The TOS byte's DSCP of each datagram arriving at 127.0.0.2:`port` for `seconds`."""
    listen = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listen.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    listen.bind(("127.0.0.2", port))
    listen.settimeout(0.05)
    seen, until = [], time.monotonic() + seconds
    try:
        while time.monotonic() < until:
            try:
                _, anc, _, _ = listen.recvmsg(256, 64)
            except TimeoutError:
                continue
            seen += [data[0] >> 2 for level, kind, data in anc if level == socket.IPPROTO_IP and kind == socket.IP_TOS]
    finally:
        listen.close()
    return seen


def test_class_probes_mark_every_packet_with_the_class_and_the_clocks_keep_theirs():
    engine = ProbeEngine("127.0.0.1", {"a": "127.0.0.1", "b": "127.0.0.2"}, ["b"], rails=[None], ports=1,
                         base_port=47410, interval_s=0.05, marking=Marking(class_dscp=26, class_interval_s=0.05),
                         seed=3)
    engine.start()
    try:
        tos = _tos_of_datagrams(47410, 1.0)
    finally:
        engine.stop()
        engine.join(2)
    assert set(tos) == {46, 26}
    # each exchange is a warm-up and a coded pair, all three in one class
    triples = [tos[i:i + 3] for i in range(0, len(tos) - len(tos) % 3, 3)]
    assert all(len(set(t)) == 1 for t in triples)
    assert engine.counters["class_probes_sent"] > 0 and engine.counters["probes_sent"] > 0


def test_class_exchanges_complete_between_two_engines_and_say_their_class():
    hosts = {"a": "127.0.0.1", "b": "127.0.0.2"}
    prober = ProbeEngine("127.0.0.1", hosts, ["b"], rails=[None], ports=2, base_port=47420, interval_s=0.05,
                         marking=Marking(class_dscp=26, class_interval_s=0.05), seed=4)
    reflector = ProbeEngine("127.0.0.2", hosts, [], rails=[None], ports=2, base_port=47420)
    for e in (prober, reflector):
        e.start()
    try:
        until = time.monotonic() + 5
        while time.monotonic() < until and {ex.dscp for ex in prober.exchanges} != {None, 26}:
            time.sleep(0.05)
    finally:
        for e in (prober, reflector):
            e.stop()
            e.join(2)
    assert {ex.dscp for ex in prober.exchanges} == {None, 26}
    assert {ex.path for ex in prober.exchanges if ex.dscp} <= set(prober.paths)  # the clock's own paths


HOP_A, HOP_B = ("s0", "h0>s0"), ("s1", "s1>h1")


def test_a_quiet_class_probe_clears_its_links_where_the_clocks_cannot():
    clock = ProbePath("h0", "h1", (HOP_A, HOP_B), floor_us=40.0, p50_us=41.0)
    in_class = ProbePath("h0", "h1", (HOP_A, HOP_B), floor_us=40.0, p50_us=42.0)
    queued = ProbePath("h0", "h2", (HOP_A,), floor_us=40.0, p50_us=3_000.0)
    limits = Thresholds()
    only_clock = observations([], Fabric(floors=[clock], collective_dscp=(26,)), limits)
    assert only_clock == []  # the priority class is quiet whatever the jobs' queue
    with_class = observations([], Fabric(floors=[clock], collective_dscp=(26,), in_class=[in_class, queued]), limits)
    assert [(o.queued, o.hops) for o in with_class] == [(False, (HOP_A, HOP_B)), (True, (HOP_A,))]


def test_a_class_probe_a_packet_above_its_floor_is_not_a_queue_but_on_a_fast_link_it_is():
    """A class probe waits behind the jobs' bursts as their flows do: one full-size packet ahead
    (120 us at 100 Mbit/s) is no queue; the same wait where every link runs at 10 Gbit/s is."""
    limits = Thresholds()
    behind = ProbePath("h0", "h2", (HOP_A,), floor_us=40.0, p50_us=40.0 + 120.0)

    def queued(rate_bps: float) -> list[bool | None]:
        fabric = Fabric(collective_dscp=(26,), in_class=[behind], link_rates={"s0": rate_bps})
        return [o.queued for o in observations([], fabric, limits)]
    assert queued(100e6) == []  # neither queued nor quiet enough to clear
    assert queued(10e9) == [True]


def test_a_reading_that_reaches_back_before_the_queue_shows_it_but_clears_nothing():
    """A class probe's delay is a median over the span of a reading. Read a second into a queue,
    most of its packets left before it (where the queue drops what it cannot hold, nearly all
    that got through did): its quiet is of the time before, and the queued link stays a suspect.
    The same quiet read once its whole span is after the queue began clears it; a queued
    reading of that span counts at once."""
    began, span = EPOCH, WINDOW
    limits = Thresholds()

    def judged(read_at: int, p50_us: float) -> list[bool | None]:
        path = ProbePath("h0", "h1", (HOP_A, HOP_B), floor_us=40.0, p50_us=p50_us, t_ns=read_at, span_ns=span)
        fabric = Fabric(collective_dscp=(26,), in_class=[path]).read_since(began)
        return [o.queued for o in observations([], fabric, limits)]
    assert judged(began + 10**9, 41.0) == []  # quiet, but mostly of before: no evidence
    assert judged(began + span, 41.0) == [False]  # quiet all of its span: clears
    assert judged(began + 10**9, 3_000.0) == [True]  # queued already: counts
    assert judged(began - 1, 3_000.0) == []  # read before the queue began: says nothing of it


def test_each_host_says_how_far_back_its_readings_reach():
    sync = HostSync("a", ["b"], window_ns=WINDOW, report_ns=5 * 10**9)
    assert sync.spans() == {"owd": 5 * 10**9, "class_owd": 5 * 10**9}
    assert HostSync("a", ["b"], window_ns=WINDOW).spans()["owd"] == WINDOW
