"""Root cause when the slow flow's switch was never traced (its trace lost in the queue that
slows it): its own host links are as suspect as any link it may cross until a sibling's round
trip clears them, so the fault's link is still named, never the sender's or receiver's host link."""

from __future__ import annotations

from clockfabric.controller.rootcause import Flow, LinkEvent, ProbePath
from clockfabric.controller.rootcause_fabric import Fabric
from clockfabric.controller.rootcause_verdict import why
from tests.unit.rootcause_timelines import NOW, S, fabric, flow, hops, receivers, ring, untraced

WINDOW = 60 * S
SLOW = (80, 2000)
HOST_LINKS = {"h1--leaf0", "h3--leaf1"}  # the slow flow's own first and last hops


def with_slow_untraced(jobid: str = "A", **slow) -> list[Flow]:
    flows = ring(jobid, h1=SLOW, **slow)
    flows[2] = untraced(flows[2])  # h1 -> h3, on spine1
    return flows


def verdict(flows: list[Flow], fab: Fabric | None = None) -> dict:
    return why("A", flows, fab or fabric(), NOW, WINDOW)


def test_the_slow_flow_may_cross_both_spines():
    f = with_slow_untraced()[2]
    assert {name for name, _ in f.may_cross()} >= {"leaf0--spine0", "leaf0--spine1", "h1--leaf0", "h3--leaf1"}
    assert f.may_cross()[0] == ("h1--leaf0", "h1>leaf0") and f.may_cross()[-1] == ("h3--leaf1", "leaf1>h3")


def test_congestion_from_another_untraced_job_names_its_spine_link():
    flows = with_slow_untraced() + [untraced(flow("h0", "h3", "spine1", "B", 700, 60, then=(700, 2000)))]
    v = verdict(flows)
    assert (v["verdict"], v["link"], v["culprit"]) == ("congestion_other_job", "leaf0--spine1", "B")


def test_congestion_from_flows_of_no_job_when_untraced():
    flows = with_slow_untraced() + [untraced(flow("h0", "h3", "spine1", None, 700, 60))]
    v = verdict(flows)
    assert (v["verdict"], v["link"], v["culprit"]) == ("congestion_non_job", "leaf0--spine1", "(no job)")


def test_degraded_fabric_link_is_named_not_the_host_links():
    # no other traffic: the healthy siblings' paths clear spine0, their round trips (their ACKs
    # in the job's class) clear the slow flow's host links; spine1's two links, which nothing
    # tells apart, are both named
    v = verdict(receivers(with_slow_untraced()))
    assert (v["verdict"], v["links"], v["ambiguous"]) == ("degraded_link", ["leaf0--spine1", "leaf1--spine1"], True)
    assert not set(v["links"]) & set(HOST_LINKS)


def test_round_trips_clear_no_host_link_where_the_acks_ride_another_class():
    # the receiving sockets mark nothing: their ACKs pass the collective class's queue, and a
    # usual round trip says nothing of it. On one FIFO a port they wait in it, and clear
    acks_elsewhere = verdict(with_slow_untraced())
    assert set(HOST_LINKS) & set(acks_elsewhere["links"]), acks_elsewhere["sentence"]
    fifo = verdict(with_slow_untraced(), Fabric(**{**fabric().__dict__, "collective_dscp": None}))
    assert fifo["links"] == ["leaf0--spine1", "leaf1--spine1"], fifo["sentence"]


def test_flapping_link_the_untraced_flow_may_cross():
    events = [LinkEvent(NOW - t * S, "leaf0--spine1", kind)
              for t, kind in ((10, "link_down"), (9, "link_up"), (8, "link_down"), (7, "link_up"))]
    v = verdict(with_slow_untraced(), fabric(events))
    assert (v["verdict"], v["link"]) == ("flapping_link", "leaf0--spine1")


def test_a_queue_on_the_receivers_link_is_named_from_the_probes_when_round_trips_see_it():
    # h3's downlink queues: the slow flow into h3 and the ACKs of h3's own flow wait there (its
    # round trip far above its siblings'), and every probe into h3 sits far above its floor
    flows = with_slow_untraced()
    flows[3] = flow("h3", "h0", "spine1", "A", 300, 60, then=(300, 2000))  # forward at the floor, RTT high
    probes = [ProbePath(s, d, hops(s, d, sp), 12.0, 900.0 if d == "h3" else 13.0)
              for s in ("h0", "h1", "h2", "h3") for d in ("h0", "h1", "h2", "h3")
              if s != d and {s, d} != {"h0", "h1"} and {s, d} != {"h2", "h3"} for sp in ("spine0", "spine1")]
    fab = Fabric(floors=probes, link_rates=fabric().link_rates, collective_dscp=(26,))
    v = verdict(flows, fab)
    assert (v["verdict"], v["link"]) == ("degraded_link", "h3--leaf1")


def test_healthy_jobs_with_untraced_flows_stay_healthy():
    flows = [untraced(f) for f in ring("A") + ring("B", mbps=200)] + [untraced(flow("h0", "h3", "spine1", None, 300, 70,
                                                                                   port=6000))]
    assert verdict(flows)["verdict"] == "healthy"


def test_repeated_downs_are_a_flapping_link_once_the_flows_have_caught_up():
    events = [LinkEvent(NOW - t * S, "leaf0--spine1", kind)
              for t, kind in ((10, "link_down"), (9, "link_up"), (8, "link_down"), (7, "link_up"))]
    v = verdict(ring("A"), fabric(events))
    assert (v["verdict"], v["link"]) == ("flapping_link", "leaf0--spine1")
    assert verdict(ring("A"), fabric(events[:2]))["verdict"] == "healthy"  # one down and up: not flapping


def test_one_down_reported_by_both_ends_is_not_two():
    events = [LinkEvent(NOW - 10 * S + dt, "leaf0--spine1", kind)
              for dt, kind in ((0, "link_down"), (10**8, "link_down"), (S, "link_up"), (S + 10**8, "link_up"))]
    assert verdict(ring("A"), fabric(events))["verdict"] == "healthy"
