"""What a job's healthy flows (its siblings) prove quiet, for `job why` (rootcause_verdict).
Pure.

A sibling at its floor measured every hop it crosses quiet: a one-way delay. A sibling whose
round trip is usual is an inference about the host links its ACKs cross on their way back; it
holds only where those ACKs wait in the queue the slow flows' data waits in. On one FIFO a
port they do. On a fabric with traffic classes a TCP ACK carries its receiving socket's DSCP
(Linux reflects none by default), so they do only where that socket marks the flow's own class;
an ACK in another class rides past the collective queue, and its usual round trip says nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from clockfabric.controller.rootcause import Flow, FlowStats, Hop, Thresholds, far_above, median, settled


def back(hop: Hop) -> Hop:
    """The same link the other way."""
    name, way = hop
    a, _, b = way.partition(">")
    return (name, f"{b}>{a}") if way else hop


def ends(flow: Flow) -> list[Hop]:
    """The hops its ACKs surely cross on their way back: its host links, the way in. (The fabric
    hashes the ACKs' 5-tuple on its own, so the switches between are not known.)"""
    return [back(h) for h in flow.hops if h[1] and (h[1].startswith(f"{flow.host}>")
                                                    or h[1].endswith(f">{flow.peer}"))]


def crossed_quiet(healthy: list[FlowStats]) -> set[Hop]:
    """The hops healthy siblings cross at their floor: a one-way delay measured them quiet."""
    return {h for s in healthy for h in s.flow.hops}


def acks_in_class(flows: list[Flow], classes: bool) -> Callable[[Flow], bool]:
    """Whether a flow's ACKs wait in its data's queue: always on one FIFO a port (`classes`
    False); with traffic classes, where its receiving socket (the flow the other way, reported
    by the peer's agent) marks the same DSCPs as it does."""
    if not classes:
        return lambda f: True
    marks = {(f.host, f.flow): set(f.marks()) for f in flows}

    def same(f: Flow) -> bool:
        sent, _, came = f.flow.partition("->")
        acks = marks.get((f.peer or "", f"{came}->{sent}"))
        return bool(acks) and acks == set(f.marks())

    return same


def returned_quiet(healthy: list[FlowStats], limits: Thresholds,
                   in_class: Callable[[Flow], bool] = lambda f: True) -> set[Hop]:
    """The host links the way in of each healthy sibling whose round trip (its ACKs' return) is
    not far above its healthy siblings', where its ACKs wait in its data's queue (`in_class`). A
    round trip is read as a delay is (`settled`): a queue its newest readings stand in is not
    averaged away by the quiet before it. An inference, not a measurement: the siblings it is
    judged against may wait in the same queue."""
    rtts = {id(s): settled([p.rtt_us for p in s.flow.points], limits.newest) for s in healthy}
    usual = median(rtts.values())
    return {h for s in healthy
            if (rtt := rtts[id(s)]) is not None and usual is not None and in_class(s.flow)
            and not far_above(rtt, usual, limits.rtt_margin_us, limits)
            for h in ends(s.flow)}


def blame(slow: list[FlowStats], healthy: list[FlowStats], limits: Thresholds | None = None,
          in_class: Callable[[Flow], bool] = lambda f: True) -> list[Hop]:
    """The hops the most network-slow flows may cross that no healthy sibling proves quiet: a
    flow's own last hop is as suspect as any until a sibling's round trip clears it."""
    quiet = crossed_quiet(healthy) | returned_quiet(healthy, limits or Thresholds(), in_class)
    counts = Counter(h for s in slow for h in s.flow.may_cross() if h not in quiet)
    if not counts:
        return []
    top = counts.most_common(1)[0][1]
    return [h for h, n in counts.items() if n == top]
