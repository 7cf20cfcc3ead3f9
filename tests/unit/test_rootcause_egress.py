"""A queue on a sender's own link to its leaf: its packets are timed after it, so neither their
in-band delays nor its probes show it until the host's own egress queue is added back: on a
fabric with traffic classes, the queue of the packets' own class."""

from __future__ import annotations

import pytest

from clockfabric.controller.rootcause import Flow
from clockfabric.controller.rootcause_fabric import Fabric
from clockfabric.controller.rootcause_inputs import waited, with_egress
from clockfabric.controller.rootcause_verdict import why
from tests.unit.rootcause_timelines import NOW, READINGS, S, fabric, flow, link, ring

UPLINK = link("h1", "leaf0")


def inband(flows: list[Flow], since: int) -> list[Flow]:
    """The ring with in-band delays at the floor: what the capture, past the host's queue, sees.
    The flow into h1 has its ACKs wait in that queue from reading `since`: its round trip rises."""
    return [flow(f.host, f.peer or "", [n for n, _ in f.hops][1].split("--")[1], f.jobid, 300, 60, owd_us=13.0,
                 then=(300, 20_060) if f.peer == "h1" else None, at=since) for f in flows]


def culprit(since: int) -> Flow:
    """Traffic of no job from h1 to h0, under the same leaf: it fills h1's uplink alone."""
    f = flow("h1", "h0", "spine0", None, 0, 60, then=(900, 60), at=since, port=7000)
    return Flow(**{**f.__dict__, "hops": ((UPLINK, "h1>leaf0"), (link("leaf0", "h0"), "leaf0>h0"))})


def queues(wait_us: float, since: int = READINGS - 8, dscp: int | None = None) -> dict:
    """h1's uplink queue (`dscp`: one class's) at `wait_us` from reading `since` on."""
    times = [NOW - (READINGS - i) * S for i in range(READINGS)]
    return {("h1", UPLINK, dscp): (times, [wait_us if i >= since else 3.0 for i in range(READINGS)])}


@pytest.mark.parametrize("newest", [8, 3])
def test_a_queue_on_the_senders_uplink_is_named_once_its_egress_queue_is_added(newest):
    """Standing for the newest 8 readings, or only 3: a round trip through the queue that young
    still clears nothing, though its median over the window is the quiet before it."""
    since = READINGS - newest
    flows = inband(ring("A"), since) + [culprit(since)]
    fab = fabric()
    assert why("A", flows, fab, NOW, 60 * S)["verdict"] == "healthy"  # the capture sees past the queue
    flows, floors = with_egress(flows, fab.floors, queues(20_000.0, since))
    v = why("A", flows, Fabric(floors, fab.link_rates, fab.events, None), NOW, 60 * S)
    assert (v["verdict"], v["link"], v["culprit"]) == ("congestion_non_job", UPLINK, "(no job)")
    assert v["evidence"]["direction"] == "h1>leaf0"
    assert [f["host"] for f in v["evidence"]["slow_flows"]] == ["h1"]


def test_only_a_hosts_own_first_hop_waits_in_its_queue():
    q = queues(20_000.0)
    out = ((UPLINK, "h1>leaf0"), (link("leaf0", "spine1"), "leaf0>spine1"))
    assert waited(q, "h1", out) == 20_000.0  # the newest
    assert waited(q, "h1", out, NOW - READINGS * S) == 3.0
    assert waited(q, "h1", out, NOW - 10**12) == 0.0  # before any reading
    assert waited(q, "h0", ((link("h0", "leaf0"), "h0>leaf0"),)) == 0.0  # another host's link
    assert waited(q, "h1", ((UPLINK, "leaf0>h1"),)) == 0.0  # into h1: not its egress


def test_a_packet_waits_in_its_own_class_queue_where_the_host_reads_one_else_the_whole():
    q = {**queues(20_000.0), **queues(40.0, dscp=26)}
    out = ((UPLINK, "h1>leaf0"),)
    assert waited(q, "h1", out, dscp=26) == 40.0  # its class's
    assert waited(q, "h1", out, dscp=0) == 20_000.0  # no queue read for its class: the whole one
    assert waited(q, "h1", out) == 20_000.0  # its DSCP unknown


@pytest.mark.parametrize("job_class_waits", [False, True])
def test_on_a_fabric_with_classes_the_jobs_own_class_queue_is_what_is_added(job_class_waits):
    """Best-effort traffic fills h1's uplink: the whole queue is long. The job's collective class
    is served apart, so only where its own class's queue stands is the uplink named."""
    since = READINGS - 8
    flows = inband(ring("A"), since) + [culprit(since)]
    fab = fabric()
    q = {**queues(20_000.0, since), **queues(20_000.0 if job_class_waits else 3.0, since, dscp=26),
         **queues(3.0, since, dscp=46)}
    flows, floors = with_egress(flows, fab.floors, q)
    assert all(p.p50_us == 13.0 for p in floors if p.src != "h1")  # another host's probes: nothing to add
    assert all(p.p50_us == 13.0 for p in floors if p.src == "h1")  # served apart: only their own round waits
    v = why("A", flows, Fabric(floors, fab.link_rates, fab.events, fab.collective_dscp), NOW, 60 * S)
    if job_class_waits:
        assert (v["verdict"], v["link"], v["culprit"]) == ("congestion_non_job", UPLINK, "(no job)")
    else:
        assert v["verdict"] == "healthy", v["sentence"]


def test_the_agents_queue_samples_reach_the_root_cause_by_link_and_class():
    from clockfabric.controller.rootcause_inputs import Places, egress_queues
    from clockfabric.controller.series.sample import Sample
    from clockfabric.topology import leafspine
    from clockfabric.workload.samples import egress_samples

    topo = leafspine(2, 2, 1)
    pushed = egress_samples({"eth0": 0.002}, {"eth0": {26: 0.0005, 46: 0.0}})
    found = egress_queues([Sample("h0", NOW, p["name"], p["value"], p["labels"]) for p in pushed], Places(topo, {}))
    uplink = Places(topo, {}).links.key("h0", "eth0")
    assert uplink and found == {("h0", uplink, None): ([NOW], [2000.0]), ("h0", uplink, 26): ([NOW], [500.0]),
                                ("h0", uplink, 46): ([NOW], [0.0])}
