"""`owd`: ours. The chunk goes to the subflow expected to deliver it first: its network delay
above the floor (queueing on the path, from the one-way delays) plus the time to drain what
it already holds and the chunk at its measured rate. A subflow that is expected to finish
later gets no bytes, so congested paths lose bytes as their delay rises, and a message's last
chunks never wait on a slow path. A subflow left idle is sent a probe now and then (probes()):
a header with no data, which the receiver acknowledges at once with its one-way delay, so a
path is re-measured (probing back slowly) without any message waiting on it. Paired with
learned source ports (one subflow per spine, its default placement), it also decides *where*
the subflows run. Once a message's last chunk is placed, a subflow left with nothing to carry
takes a copy of the chunk another subflow is expected to deliver last, where it would deliver
it sooner by more than a window's time (spare()): TCP cannot take back what a slow subflow
holds, so the copy races it and the receiver keeps whichever arrives first."""

from __future__ import annotations

from typing import ClassVar

from clockfabric.collective.schedule import PROBE_EVERY, SubflowState
from clockfabric.collective.schedulers.base import SCHEDULERS, SharedQueue


def default_rate(subs: list[SubflowState]) -> float:
    """The rate to assume for a subflow not measured yet: the mean of those measured."""
    rates = [s.rate for s in subs if s.rate > 0]
    return sum(rates) / len(rates) if rates else 1.0


@SCHEDULERS.register("owd", help="the subflow expected to deliver the chunk first, by one-way delays")
class Owd(SharedQueue):
    placement: ClassVar[str] = "learned"
    copies: ClassVar[bool] = True

    def choose(self, subs: list[SubflowState], length: int, owed: list[int]) -> int | None:
        default = default_rate(subs)
        i = min((j for j in range(len(subs)) if not subs[j].parked),
                key=lambda j: subs[j].finish_ns(min(length, subs[j].chunk), default))
        return i if subs[i].outstanding < subs[i].window else None  # the best is full: wait for it, don't settle

    def probes(self, subs: list[SubflowState]) -> list[int]:
        """Subflows to probe now: idle for PROBE_EVERY chunks, with nothing in flight."""
        return [j for j, s in enumerate(subs) if s.idle >= PROBE_EVERY and s.outstanding == 0 and not s.parked]

    def spare(self, subs: list[SubflowState], j: int, lasts: list[tuple[int, int] | None]) -> int | None:
        """Once every chunk of the messages at hand is placed: which subflow's chunk subflow j
        should carry a copy of, or None. lasts[i]: for subflow i, the last chunk it holds
        unacknowledged and not yet copied, as (bytes queued up to and including it, its
        length), or None. The copy goes where it gains most: where i is expected to deliver
        the chunk later than j would by more than j's time for a whole window. A copy costs a
        chunk of j's time and of capacity; with a margin of one chunk, copies taken between a
        pipelined ring's slices cost two all-reduces 6-9% (docs/notes/2026-11-23-contention.md)."""
        if subs[j].parked or subs[j].outstanding >= subs[j].window:
            return None
        default = default_rate(subs)
        best, most = None, 0.0
        for i, last in enumerate(lasts):
            if i == j or last is None:
                continue
            upto, length = last
            there = subs[i].excess_ns + upto / (subs[i].rate or default)
            gain = there - subs[j].finish_ns(length, default) - subs[j].window / (subs[j].rate or default)
            if gain > most:
                best, most = i, gain
        return best
