"""How long any one collective operation of the job may wait, sized from the steps it measured.

Gloo fails a pair's queued operations when its connection fails, but not a send already in
flight: a survivor caught sending to a lost rank waits out the group's timeout, whatever the
fence shut. So once a generation has completed WARMUP steps, every later operation of its group
is given

    bound = min(job's timeout, max(FLOOR_S, FACTOR x the slowest of the last WINDOW steps))

A wait inside a step's collectives (for the slowest peer to arrive, then for the bytes) never
outlasts the step: the slowest step measured, times FACTOR, leaves room for the machine to get
that much slower between two steps. Load that grows more slowly raises the window's slowest
step, and the bound with it. A step that reached the bound and failed with no member lost (the
coordinator then issues the generation again, the same members in it) was slow, not cut off: its
time counts as a measured step (`slow`), so the same slowness does not fire the bound twice.
Each rank measures its own steps; the group's all-reduce makes them nearly equal, and a rank
whose bound fires first fails its step and shuts its sockets to its peers, which fails theirs
(docs/spares.md, "The all-reduce's bound").
"""

from __future__ import annotations

from collections import deque

FLOOR_S = 3.0  # above the coordinator's detection (2 s): a lost peer is fenced before the bound fires
FACTOR = 4.0
WINDOW = 50  # completed steps, across generations
WARMUP = 3  # steps of a new group under the job's timeout: DDP's first steps rebuild its buckets


class StepBound:
    def __init__(self, ceiling_s: float):
        self.ceiling_s = ceiling_s  # the job's collective timeout: the bound never exceeds it
        self.recent: deque[float] = deque(maxlen=WINDOW)
        self.steps_in_group = 0
        self.applied = ceiling_s  # the timeout the group has now

    def joined(self) -> float:
        """A new group: the timeout its first steps run under (the job's own)."""
        self.steps_in_group, self.applied = 0, self.ceiling_s
        return self.applied

    def completed(self, duration_s: float) -> float | None:
        """A step of the group completed in duration_s: the group's new timeout, if it changed."""
        self.recent.append(duration_s)
        self.steps_in_group += 1
        value = self.value()
        if value == self.applied:
            return None
        self.applied = value
        return value

    def value(self) -> float:
        if self.steps_in_group < WARMUP:
            return self.ceiling_s
        return min(self.ceiling_s, max(FLOOR_S, FACTOR * max(self.recent)))

    def fired(self, elapsed_s: float) -> bool:
        """Whether a step that failed elapsed_s after it began ran into the bound (it lasted at
        least the bound, which is below the job's timeout), rather than failing on a peer's loss."""
        return self.applied < self.ceiling_s and elapsed_s >= self.applied

    def slow(self, elapsed_s: float) -> None:
        """A step the bound cut, with no member lost: it took at least elapsed_s, count it."""
        self.recent.append(elapsed_s)
