"""A queue on a sender's own link to its leaf: its packets are timed after it, so neither their
in-band delays nor its probes show it until the host's own egress queue is added back."""

from __future__ import annotations

import pytest

from clockfabric.controller.rootcause import Flow
from clockfabric.controller.rootcause_inputs import waited, with_egress
from clockfabric.controller.rootcause_verdict import Fabric, why
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


def queues(wait_us: float, since: int = READINGS - 8) -> dict:
    times = [NOW - (READINGS - i) * S for i in range(READINGS)]
    return {("h1", UPLINK): (times, [wait_us if i >= since else 3.0 for i in range(READINGS)])}


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
