"""`ecmp`: the baseline. Each subflow has a fixed, equal share of every message (contiguous
ranges, as NCCL's channels); the path is whatever the switches' hash made of it. Shares go
out side by side: no subflow waits for another's window. A parked subflow gets no share (a
share already planned on a subflow parked since stays on it)."""

from __future__ import annotations

from itertools import pairwise

from clockfabric.collective.ring import bounds
from clockfabric.collective.schedule import CHUNK, Range, SubflowState, cut
from clockfabric.collective.schedulers.base import SCHEDULERS, SharedQueue


@SCHEDULERS.register("ecmp", help="a fixed, equal share of every message per subflow")
class Ecmp(SharedQueue):
    def plan(self, size: int, subs: list[SubflowState]) -> list[list[Range]]:
        """One queue per subflow: its share (none for a parked one)."""
        active = [i for i, s in enumerate(subs) if not s.parked]
        queues: list[list[Range]] = [[] for _ in subs]
        for i, (a, b) in zip(active, pairwise(bounds(size, len(active))), strict=True):
            queues[i] = cut(a, b, -(-(b - a) // CHUNK))
        return queues

    def queue(self, queues: list[list[Range]], i: int) -> list[Range]:
        return queues[i]

    def choose(self, subs: list[SubflowState], length: int, owed: list[int]) -> int | None:
        """A subflow with chunks of its own share still owed and room in its window (the one
        owed most): shares are fixed, but no subflow waits for another's window."""
        ready = [i for i in range(len(subs)) if owed[i] and subs[i].outstanding < subs[i].window]
        return max(ready, key=lambda i: owed[i]) if ready else None
