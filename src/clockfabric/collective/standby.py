"""Standby subflows: a second subflow on a spine, at work while traffic from outside the
jobs' claims holds the queue there.

The agents' ledger (claims.py) counts the subflows that jobs under a leaf hold on each spine,
and each takes its share of a window budget sized to the uplink's FIFO. So while only
those jobs share an uplink, their windows fit its FIFO: the receive window holds each
subflow, and next to no segment is lost. Traffic the ledger does not know (another tenant's
elephant flows) fills the FIFO: a subflow there loses segments, and its congestion window
holds it. TCP shares a FIFO about equally among the flows in it, so one subflow per peer gets
about an equal share against each outside flow, and less where its window runs smaller.
(Meta scales queue pairs for the same reason.)

So with learned placement every subflow placed on a spine has a standby: a second
connection through the same spine (another learned source port), dialled up front and
parked (the transport gives it no chunk). Every WATCH_S the rank reads the kernel's counters
of both (tcpinfo.tcp_counters), and over the last LOOK_S:

- crowded: the pair was busy for at least BUSY of the time, its congestion window held it
  for at least CWND of that, and it lost at least LOSSES segments: the standby goes to work.
  Lost, not only resent: a subflow alone on its spine, dropping nothing, resent 13-32 segments
  in 16 s that its receiver already had (tail-loss probes, timeouts on acks held late by a busy
  machine), and the receiver's D-SACKs tell those apart;
- once QUIET_S have passed with no crowded look back, it is parked again (what it holds drains).

In the lab (docs/notes/2026-11-23-contention.md): against CUBIC elephants, the subflows on their spine were
congestion-window-limited 0.98-1.00 of their busy time and resent 54-75 segments in 25 s;
with only the jobs' own subflows (two all-reduces, two all-to-alls, a job alone), 0.01-0.27
and 0-2 segments in 14-43 s; on a link cut to a quarter of its rate, 1.00 but 0-1 segments.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from clockfabric.collective.transport import TcpCounters, Transport

WATCH_S = 1.0  # how often the counters are read
LOOK_S = 3.0  # how far back a read looks
BUSY = 0.5  # of the time looked back: data in flight
CWND = 0.5  # of the busy time: held by the congestion window
LOSSES = 3  # segments lost (resent, and not already had by the receiver) within the look back
QUIET_S = 10.0  # with no crowded look back this long, the standby is parked again

Subflow = tuple[int, int]  # (peer rank, subflow index)


def crowded(delta: TcpCounters, span_us: float) -> bool:
    """Did these counters, over span_us, come from a subflow whose queue others fill?"""
    return (delta.busy_us >= BUSY * span_us and delta.cwnd_limited_us >= CWND * delta.busy_us
            and delta.losses >= LOSSES)


class Watch:
    """One placed subflow and its standby: whether the standby should be at work, from the
    pair's counters (summed) read now and then. Pure: the caller gives the times."""

    def __init__(self) -> None:
        self.reads: deque[tuple[float, TcpCounters]] = deque()
        self.working = False
        self.last_crowded = 0.0

    def read(self, now_s: float, counters: TcpCounters) -> bool:
        """Take the pair's counters as read at now_s (cumulative since connect); whether the
        standby should be at work now."""
        self.reads.append((now_s, counters))
        while len(self.reads) > 1 and now_s - self.reads[1][0] >= LOOK_S:  # keep one read LOOK_S back
            self.reads.popleft()
        then, before = self.reads[0]
        if now_s - then >= LOOK_S and crowded(counters - before, (now_s - then) * 1e6):
            self.working, self.last_crowded = True, now_s
        elif self.working and now_s - self.last_crowded >= QUIET_S:
            self.working = False
        return self.working


def watch(links: Transport, pairs: dict[Subflow, Subflow], done: threading.Event) -> None:
    """Put each pair's standby (pairs: placed subflow -> its standby) to work or park it, as
    its Watch says, every WATCH_S until `done`."""
    watches = {key: Watch() for key in pairs}
    while not done.wait(WATCH_S):
        now = time.monotonic()
        for (peer, i), (_, j) in pairs.items():
            a, b = links.counters(peer, i), links.counters(peer, j)
            if a is None or b is None:  # closed
                return
            was = watches[(peer, i)].working
            if watches[(peer, i)].read(now, a + b) != was:
                links.park(peer, j, parked=was)
