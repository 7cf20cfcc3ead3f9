"""What the transport asks of a scheduler, what most schedulers share, and the registry of them.

Per message to a peer the transport's dispatcher asks plan() to cut it into queues of byte
ranges; until they are empty it sends the probes() asked for, asks pick() for the subflow to
carry the next chunk (None: wait for an ack, then ask again) and takes that subflow's chunk
from queue(queues, i) (schedule.take). Acks update the SubflowStates a scheduler reads
(SubflowState.on_ack). Once nothing is left to place, a scheduler whose `copies` is set may
give an idle subflow a copy of the chunk another is expected to deliver last (spare()).
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from clockfabric.collective.schedule import CHUNK, Range, SubflowState, cut
from clockfabric.registry import Registry


class Scheduler(Protocol):
    placement: ClassVar[str]  # the source ports it runs on unless told: "hashed" or "learned"
    copies: ClassVar[bool]  # whether it races a slow subflow's last chunks with copies (spare())

    def plan(self, size: int, subs: list[SubflowState]) -> list[list[Range]]: ...

    def queue(self, queues: list[list[Range]], i: int) -> list[Range]: ...

    def pick(self, subs: list[SubflowState], queues: list[list[Range]]) -> int | None: ...

    def probes(self, subs: list[SubflowState]) -> list[int]: ...

    def spare(self, subs: list[SubflowState], j: int, lasts: list[tuple[int, int] | None]) -> int | None: ...


SCHEDULERS: Registry[type[Scheduler]] = Registry("scheduler", load="clockfabric.collective.schedulers")


def scheduler(name: str) -> Scheduler:
    """The scheduler registered as `name`; an unknown name is one line listing the known ones."""
    return SCHEDULERS.get(name).factory()


class SharedQueue:
    """A scheduler that may place any chunk on any subflow: a message is one queue of chunks,
    as many as CHUNK needs and at least one per subflow at work; no probes, no copies.
    Subclasses say which subflow takes the next chunk (choose)."""

    placement: ClassVar[str] = "hashed"
    copies: ClassVar[bool] = False

    def plan(self, size: int, subs: list[SubflowState]) -> list[list[Range]]:
        active = sum(1 for s in subs if not s.parked)
        return [cut(0, size, max(-(-size // CHUNK), min(active, size)))]

    def queue(self, queues: list[list[Range]], i: int) -> list[Range]:
        return queues[0]

    def choose(self, subs: list[SubflowState], length: int, owed: list[int]) -> int | None:
        """The subflow for a chunk of `length` bytes (owed: chunks left in each queue), or None."""
        raise NotImplementedError

    def pick(self, subs: list[SubflowState], queues: list[list[Range]]) -> int | None:
        """The subflow for the next chunk, or None: wait for an ack, then ask again. The others
        count one more chunk gone elsewhere (SubflowState.idle)."""
        length = next((b - a for q in queues for a, b in q[:1]), 0)
        i = self.choose(subs, length, [len(q) for q in queues])
        if i is not None:
            for j, s in enumerate(subs):
                if j != i:
                    s.idle += 1
        return i

    def probes(self, subs: list[SubflowState]) -> list[int]:
        return []

    def spare(self, subs: list[SubflowState], j: int, lasts: list[tuple[int, int] | None]) -> int | None:
        return None
