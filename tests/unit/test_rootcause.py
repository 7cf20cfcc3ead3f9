"""Root cause on recorded multi-flow timelines: one fixture per verdict class, and a healthy
pair of jobs with background traffic."""

from __future__ import annotations

from dataclasses import replace

import pytest

from clockfabric.controller.rootcause import Flow, FlowPoint, LinkEvent, Thresholds, job_flows, settled
from clockfabric.controller.rootcause_fabric import Fabric
from clockfabric.controller.rootcause_verdict import PROVISIONAL, filled, upstream, why
from tests.unit.rootcause_timelines import NOW, READINGS, S, fabric, flow, receivers, ring

WINDOW = 60 * S
SLOW = (80, 2000)  # Mbit/s, RTT us: a flow behind a queue


def verdict(flows: list[Flow], fab: Fabric | None = None, jobid: str = "A", limits: Thresholds | None = None) -> dict:
    return why(jobid, flows, fab or fabric(), NOW, WINDOW, limits)


def test_congestion_from_another_job_names_the_link_and_the_job():
    flows = ring("A", h1=SLOW) + [flow("h0", "h3", "spine1", "B", 700, 60, then=(700, 2000))]
    v = verdict(flows)
    assert v["verdict"] == "congestion_other_job"
    assert (v["link"], v["culprit"]) == ("leaf0--spine1", "B")
    assert "job B" in v["sentence"] and "leaf0--spine1" in v["sentence"]
    assert [f["flow"] for f in v["evidence"]["slow_flows"]] == [flows[2].flow]
    assert v["evidence"]["load_bps"]["B"] == pytest.approx(700e6, rel=0.05)


def test_congestion_from_flows_of_no_job():
    flows = ring("A", h1=SLOW) + [flow("h0", "h3", "spine1", None, 700, 60, then=(700, 2000))]
    v = verdict(flows)
    assert (v["verdict"], v["link"], v["culprit"]) == ("congestion_non_job", "leaf0--spine1", "(no job)")


SPINE1 = ["leaf0--spine1", "leaf1--spine1"]  # leaf0 -> spine1 -> leaf1: every path across one crosses both


def test_degraded_link_queues_while_carrying_little():
    # two slow flows over spine1 and a healthy one from h1: only leaf0 -> spine1 and spine1 -> leaf1 stay
    # suspect, and no path or load tells them apart: both are named, not the first on the way
    v = verdict(ring("A", h1=SLOW) + [flow("h0", "h2", "spine1", "A", 300, 60, port=5001, then=SLOW),
                                      flow("h1", "h2", "spine0", "A", 300, 60, port=5002)])
    assert (v["verdict"], v["link"], v["links"], v["ambiguous"]) == ("degraded_link", None, SPINE1, True)
    assert "configured 1000 Mbit/s" in v["sentence"] and "cannot tell them apart" in v["sentence"]
    assert [c["link"] for c in v["evidence"]["candidates"]] == SPINE1


def test_a_link_queueing_under_half_its_rate_is_degraded_whoever_loads_it():
    # job B sends 150 Mbit/s over spine1 with A's slow flows, far above the share that makes it a
    # culprit (a tenth), far under the link's 1000: a load that fills nothing queues nothing, so
    # the link drains slower than its rate; near its rate, the same link is B's congestion
    def with_b(mbps: float) -> dict:
        return verdict(ring("A", h1=SLOW) + [flow("h0", "h2", "spine1", "A", 300, 60, port=5001, then=SLOW),
                                             flow("h1", "h2", "spine0", "A", 300, 60, port=5002),
                                             flow("h0", "h3", "spine1", "B", mbps, 60, port=5003, then=(mbps, 2000))])
    v = with_b(150)
    assert (v["verdict"], v["links"], v["culprit"]) == ("degraded_link", SPINE1, None), v["sentence"]
    assert v["evidence"]["load_bps"]["B"] == pytest.approx(150e6, rel=0.05)
    full = with_b(900)
    assert (full["verdict"], full["culprit"]) == ("congestion_other_job", "B"), full["sentence"]


def test_a_load_that_fills_a_link_queues_where_it_is_fullest_and_first():
    # job B's 700 Mbit/s crosses leaf0 -> spine1 -> leaf1 with A's slow flow: where both links are as
    # fast, what leaves the first cannot queue at the second; where the second is narrower, it is
    # the fuller of the two, and the queue is there
    flows = ring("A", h1=SLOW) + [flow("h0", "h3", "spine1", "B", 700, 60, then=(700, 2000))]
    v = verdict(flows)
    assert (v["link"], v["links"], v["ambiguous"]) == ("leaf0--spine1", ["leaf0--spine1"], False)
    narrow = fabric()
    narrow.link_rates["leaf1--spine1"] = 0.4e9
    v = verdict(flows, narrow)
    assert (v["verdict"], v["culprit"], v["link"]) == ("congestion_other_job", "B", "leaf1--spine1")
    assert "configured" not in v["sentence"] and "B sends 700 Mbit/s" in v["sentence"]
    assert v["evidence"]["link_rate_bps"] == 0.4e9


def test_upstream_keeps_a_hop_only_where_no_hop_before_it_is_as_narrow():
    rates = {"a": 10.0, "b": 10.0, "c": 5.0, "d": 20.0}
    way = [("a", "x>y"), ("b", "y>z"), ("c", "z>w"), ("d", "w>v"), ("e", "v>u")]
    assert upstream(way, rates) == [("a", "x>y"), ("c", "z>w"), ("e", "v>u")]  # e: its rate unknown


def test_filled_keeps_the_fullest_hops_then_the_first_of_a_run_as_narrow():
    rates = {"a": 10.0, "b": 10.0, "c": 5.0, "d": 20.0}
    way = [("a", "x>y"), ("b", "y>z"), ("c", "z>w"), ("d", "w>v"), ("e", "v>u")]
    load = {"a": 6.0, "b": 6.0, "c": 6.0, "d": 6.0}
    assert filled(way, rates, lambda h: load.get(h[0], 0.0)) == [("c", "z>w"), ("e", "v>u")]  # 1.2 full; e unknown
    load = {"a": 9.5, "b": 9.0, "c": 2.0, "d": 2.0}  # within a tenth of each other: the first of the two
    assert filled(way[:4], rates, lambda h: load[h[0]]) == [("a", "x>y")]


def test_flapping_link_with_its_events():
    events = [LinkEvent(NOW - t * S, "leaf0--spine1", kind)
              for t, kind in ((40, "link_down"), (38, "link_up"), (20, "link_down"), (18, "link_up"))]
    events.append(LinkEvent(NOW - 39 * S, "", "failover_plane_down"))
    v = verdict(ring("A", h1=(20, 60)), fabric(events))
    assert (v["verdict"], v["link"]) == ("flapping_link", "leaf0--spine1")
    assert "4 downs and ups" in v["sentence"] and "1 failovers" in v["sentence"]
    assert len(v["evidence"]["events"]) == 5


def test_link_events_while_the_job_is_fine_are_not_its_cause():
    events = [LinkEvent(NOW - t * S, "leaf0--spine1", k) for t, k in ((40, "link_down"), (38, "link_up"))]
    assert verdict(ring("A"), fabric(events))["verdict"] == "healthy"


def test_misconfigured_class_by_dscp():
    flows = ring("A", h1=SLOW)
    flows[2] = Flow(**{**flows[2].__dict__, "dscp": 0})
    v = verdict(flows)
    assert v["verdict"] == "misconfigured_class"
    assert v["evidence"]["dscp"] == [0] and v["evidence"]["flows"] == [f"h1 {flows[2].flow}"]


def test_dscp_is_not_judged_without_traffic_classes():
    flows = ring("A")
    flows[0] = Flow(**{**flows[0].__dict__, "dscp": 0})
    assert verdict(flows, Fabric(collective_dscp=None))["verdict"] == "healthy"


@pytest.mark.parametrize("plane", [None, 1])
def test_misconfigured_interface(plane):
    flows = ring("A")
    flows[3] = Flow(**{**flows[3].__dict__, "plane": plane})
    v = verdict(flows)
    assert v["verdict"] == "misconfigured_interface"
    assert v["evidence"]["flows"] == [f"h3 {flows[3].flow}"] and v["evidence"]["plane"] == 0


def test_straggler_host_its_flows_idle_at_their_floor():
    v = verdict(ring("A", h2=(20, 60)))
    assert (v["verdict"], v["culprit"]) == ("straggler_host", "h2")
    assert v["sentence"].startswith("not the network")
    assert v["throughput_ratio"] < 0.8


def test_a_starved_flow_whose_send_queue_went_unread_is_not_judged_a_straggler():
    """Idle is read, not assumed: where a host's readings came late and its flows' send queues
    went unread, a flow far under its siblings' rate may be held by the network as well as idle."""
    unread = [Flow(**{**f.__dict__, "points": tuple(replace(p, send_queue_bytes=None) for p in f.points)})
              for f in ring("A", h2=(20, 60))]
    v = verdict(unread)
    assert v["verdict"] == "rate_unexplained" and v["verdict"] in PROVISIONAL and v["culprit"] is None
    assert v["evidence"]["flows"] == [f"h2 {f.flow}" for f in unread if f.host == "h2"]
    assert v["evidence"]["readings"] == [10] and "h2's came 10 in the span judged" in v["sentence"]
    assert not any(f["starved"] or f["network_slow"] for f in v["flows"])
    # read in its newest readings only, and empty: idle, a straggler
    newest = [Flow(**{**f.__dict__, "points": tuple(replace(p, send_queue_bytes=None if i < len(f.points) - 3
                                                             else 0.0) for i, p in enumerate(f.points))})
              for f in unread]
    assert (verdict(newest)["verdict"], verdict(newest)["culprit"]) == ("straggler_host", "h2")


def waiting(flows: list[Flow], host: str, held: list[float], others: float = 0.0) -> list[Flow]:
    """The flows with their send queues: `held` bytes, reading by reading to the newest, for
    `host`'s flow (its older readings and every other flow's: `others`)."""
    def queued(f: Flow) -> Flow:
        values = [others] * (len(f.points) - len(held)) + held if f.host == host else [others] * len(f.points)
        return Flow(**{**f.__dict__, "points": tuple(replace(p, send_queue_bytes=v)
                                                      for p, v in zip(f.points, values, strict=True))})
    return [queued(f) for f in flows]


def test_a_starved_flow_with_its_data_waiting_is_held_by_the_network_not_a_straggler():
    """A rate cut with no delay to show for it (a loss, a queue not sampled yet): its data waits
    in its send queue, where a stopped program's would not."""
    # held for 3 s: a queue's delay may not show yet where it waits
    young = verdict(waiting(ring("A", h2=(20, 60)), "h2", [200_000.0] * 3))
    assert young["verdict"] == "held_unlocated" and young["verdict"] in PROVISIONAL
    assert young["evidence"]["held_s"] == pytest.approx(3.0)
    held = verdict(waiting(ring("A", h2=(20, 60)), "h2", [200_000.0] * 6))  # 6 s: it would have
    assert held["verdict"] not in ("straggler_host", "healthy", *PROVISIONAL)
    slow = [f for f in held["flows"] if f["network_slow"]]
    assert [f["host"] for f in slow] == ["h2"] and "KiB wait to be sent" in slow[0]["why"][-1]
    # a paced writer's send queue holds a write now and then: no standing wait
    flicker = verdict(waiting(ring("A", h2=(20, 60)), "h2", [4096.0, 0.0, 4096.0], others=4096.0))
    assert (flicker["verdict"], flicker["culprit"]) == ("straggler_host", "h2")
    idle = verdict(waiting(ring("A", h2=(20, 60)), "h2", [0.0] * 3, others=4096.0))
    assert (idle["verdict"], idle["culprit"]) == ("straggler_host", "h2")


def test_a_flow_held_with_half_its_siblings_is_no_straggler():
    """A fault that holds half the job (a slow link into the host two of its flows reach, whose
    ACKs a third waits for): their data waits too, so the held flow is read against the least any
    sibling's waits, a healthy flow's, not against their median, which is the fault's."""
    waits = {"h2": 200_000.0, "h0": 150_000.0, "h1": 150_000.0}  # h3's flow: nothing waits
    flows = [Flow(**{**f.__dict__, "points": tuple(replace(p, send_queue_bytes=waits.get(f.host, 0.0))
                                                   for p in f.points)}) for f in ring("A", h2=(20, 60))]
    v = verdict(flows)
    assert v["verdict"] not in ("straggler_host", "healthy", "rate_unexplained")
    slow = [f for f in v["flows"] if f["network_slow"]]
    assert [f["host"] for f in slow] == ["h2"] and "least of theirs 0.0 ms" in slow[0]["why"][-1]


def resending(flows: list[Flow], host: str, rises: list[float], others: float = 0.0) -> list[Flow]:
    """The flows with their retransmission counters: `host`'s flow rising by `rises`, reading by
    reading to the newest (before them, by `others` a reading, as every other flow's)."""
    def counted(f: Flow) -> Flow:
        steps = [others] * (len(f.points) - len(rises)) + rises if f.host == host else [others] * len(f.points)
        totals = [1000.0 + sum(steps[:i + 1]) for i in range(len(steps))]  # a counter: from the socket's life
        return Flow(**{**f.__dict__, "points": tuple(replace(p, retransmits=v)
                                                      for p, v in zip(f.points, totals, strict=True))})
    return [counted(f) for f in flows]


def test_a_starved_flow_that_keeps_resending_is_held_by_the_network_not_a_straggler():
    """A flow waiting out retransmission timeouts behind a link that drops what it cannot hold:
    its rate cut, its delay at the floor (what gets through met no queue), nothing waiting to be
    written; its segments sent again tell it from a stopped program's, which sends nothing."""
    young = verdict(resending(ring("A", h2=(20, 60)), "h2", [4.0, 5.0, 3.0]))  # 12 lost in 3 s
    assert young["verdict"] == "held_unlocated" and young["evidence"]["held_s"] == pytest.approx(3.0)
    held = verdict(resending(ring("A", h2=(20, 60)), "h2", [3.0, 0.0, 4.0, 0.0, 3.0, 2.0]))  # timeouts apart
    assert held["verdict"] not in ("straggler_host", "healthy", *PROVISIONAL)
    slow = [f for f in held["flows"] if f["network_slow"]]
    assert [f["host"] for f in slow] == ["h2"] and "12 segments sent again" in slow[0]["why"][-1]
    assert slow[0]["resent"] == 12
    # a few lost, or no more than its siblings lose: a stopped program, as before
    few = verdict(resending(ring("A", h2=(20, 60)), "h2", [3.0, 3.0, 3.0]))
    assert (few["verdict"], few["culprit"]) == ("straggler_host", "h2")
    alike = verdict(resending(ring("A", h2=(20, 60)), "h2", [5.0] * 6, others=4.0))
    assert (alike["verdict"], alike["culprit"]) == ("straggler_host", "h2")
    # a counter that falls (a socket of the group closed) loses nothing
    closed = verdict(resending(ring("A", h2=(20, 60)), "h2", [-500.0, 0.0, 0.0]))
    assert (closed["verdict"], closed["culprit"]) == ("straggler_host", "h2")


def test_healthy_with_background_traffic():
    flows = ring("A") + ring("B", mbps=200) + [flow("h0", "h3", "spine1", None, 300, 70, port=6000)]
    v = verdict(flows)
    assert v["verdict"] == "healthy" and v["sentence"].startswith("not the network")
    assert not any(f["network_slow"] or f["starved"] for f in v["flows"])


def test_slow_flows_with_no_path_map_are_not_pinned_on_a_link():
    flows = [Flow(**{**f.__dict__, "hops": ()}) for f in ring("A", h1=SLOW)]
    v = verdict(flows, fabric(floors=False))
    assert v["verdict"] == "slow_unlocated" and v["link"] is None


def test_a_job_with_no_readings():
    assert verdict(ring("B"))["verdict"] == "no_flows"


def test_receiving_ends_are_not_starved_senders():
    receivers = [flow(d, s, "spine0", "A", 0, 60, port=7000 + i)
                 for i, (s, d) in enumerate([("h0", "h2"), ("h1", "h3")])]
    v = verdict(ring("A") + receivers)
    assert v["verdict"] == "healthy" and len(v["flows"]) == 4


def test_a_lone_flow_is_held_to_its_probe_floor_and_inband_owd_wins_over_rtt():
    lone = [flow("h0", "h2", "spine0", "A", 300, 60, owd_us=400)]
    recent = NOW - Thresholds().recent_ns
    (stats,) = job_flows(lone, "A", NOW - WINDOW, recent, Thresholds(), fabric().floors)
    assert stats.delay_source == "inband" and stats.network_slow
    assert "probe floor 12 us" in stats.why[0]
    (fallback,) = job_flows([flow("h0", "h2", "spine0", "A", 300, 60)], "A", NOW - WINDOW, recent, Thresholds(),
                            fabric().floors)
    assert fallback.delay_source == "rtt/2" and not fallback.network_slow  # 30 us: within RTT/2's margin


def test_a_fault_is_judged_on_the_latest_readings():
    early = ring("A", h1=SLOW)  # slow from the middle of the window: judged slow now
    assert verdict(early)["verdict"] != "healthy"
    later = tuple(FlowPoint(NOW + i * S, 300e6, 60) for i in range(1, 12))
    recovered = [Flow(**{**f.__dict__, "points": f.points + later}) for f in early]
    assert why("A", recovered, fabric(), NOW + 11 * S, WINDOW)["verdict"] == "healthy"


def test_a_fleet_writing_every_ten_seconds_is_judged_on_its_latest_readings():
    """Hosts that write every 10 s: a flow's newest reading is up to a spacing old, more with the
    engine's lag, and the recent part of the window reaches back two of the job's spacings."""
    def sparse(flows: list[Flow], every: int = 10) -> list[Flow]:
        return [Flow(**{**f.__dict__, "points": f.points[every - 1::every]}) for f in flows]

    slow = sparse(ring("A", h1=SLOW))  # readings at NOW - 21, 11 and 1 s: h1's last two slow
    for late_s in (0, 12, 18):  # asked on time, a reading late, nearly two
        v = why("A", slow, fabric(), NOW + late_s * S, WINDOW)
        assert v["verdict"] != "no_flows", late_s
        assert [r["host"] for r in v["flows"] if r["network_slow"]] == ["h1"], late_s
    on_time = sparse(ring("A"))
    assert why("A", on_time, fabric(), NOW + 12 * S, WINDOW)["verdict"] == "healthy"
    stopped = on_time[:3] + [Flow(**{**on_time[3].__dict__, "points": on_time[3].points[:-2]})]  # 21 s old
    assert [r["host"] for r in why("A", stopped, fabric(), NOW + 12 * S, WINDOW)["flows"]] == ["h0", "h2", "h1"]


def slow_lately(readings: int) -> list[Flow]:
    """Job A's ring with h1's flow behind a queue for only its newest `readings` readings."""
    return [Flow(**{**f.__dict__, "points": f.points[:-readings] + slow.points[-readings:]})
            for f, slow in zip(ring("A"), ring("A", h1=SLOW), strict=True)]


def test_a_queue_held_by_the_newest_readings_is_judged_before_it_fills_half_the_window():
    found = verdict(slow_lately(5))  # 5 of 30 readings: the median is still the floor
    half = verdict(ring("A", h1=SLOW))  # the same queue, held for half the window
    assert (found["verdict"], found["link"]) == (half["verdict"], half["link"]) != ("healthy", None)
    assert [r["host"] for r in found["flows"] if r["network_slow"]] == ["h1"]


def test_a_young_queue_no_load_explains_is_not_called_degraded_before_a_new_flow_could_be_seen():
    """A flow that has just started is reported seconds after the queue it builds: a queue younger
    than that, on a link carrying little that is seen, is unexplained as yet, then named by what
    comes first: the new flow's load, or, none coming, a degraded link. (The job marks both
    ends: its ACKs ride its class, so the siblings' round trips clear the host links.)"""
    young = verdict(receivers(slow_lately(3)))  # 3 s of queue: a new flow's load takes 4 s to be seen
    assert (young["verdict"], young["links"]) == ("queue_unexplained", SPINE1)
    assert young["verdict"] in PROVISIONAL and young["evidence"]["queue_age_s"] == pytest.approx(3.0)
    assert "younger than a new flow's load takes to be seen (4 s)" in young["sentence"]
    assert verdict(slow_lately(3), limits=Thresholds(unseen_ns=2 * S))["verdict"] == "degraded_link"
    culprit = flow("h0", "h3", "spine1", "B", 0, 60, then=(700, 2000), at=READINGS - 2)  # reported 2 s ago
    v = verdict(slow_lately(3) + [culprit])
    assert (v["verdict"], v["link"], v["culprit"]) == ("congestion_other_job", "leaf0--spine1", "B")
    old = verdict(receivers(slow_lately(5)))
    assert (old["verdict"], old["links"]) == ("degraded_link", SPINE1)


def test_a_spike_in_fewer_than_the_newest_readings_is_not_judged_slow():
    assert verdict(slow_lately(2))["verdict"] == "healthy"
    assert verdict(slow_lately(3), limits=Thresholds(newest=4))["verdict"] == "healthy"


def test_settled_delay_is_the_median_unless_the_newest_readings_all_stand_above_it():
    assert settled([10.0, 10.0, 10.0, 10.0, 500.0, 400.0, 450.0], 3) == 400.0
    assert settled([10.0, 10.0, 10.0, 10.0, 500.0, 9.0, 450.0], 3) == 10.0
    assert settled([10.0, 10.0, 10.0, 10.0, 500.0, 400.0, 450.0], 4) == 10.0
    assert settled([None, 20.0, 30.0], 3) == 25.0
    assert settled([None], 3) is None
