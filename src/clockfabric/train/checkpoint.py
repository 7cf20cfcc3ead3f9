"""A disk checkpoint every K steps: the last resort when no member's memory holds a rank's state.

Each rank writes its own file (the state `train.state` carries: parameters, its optimizer
state or ZeRO-1 shard, generators, position, step) as `step{S}.rank{r}.pt` in a folder every
rank and spare can read, written aside and renamed into place, so a file is whole or absent.
A checkpoint at step S is usable once every rank's file for S is there; each rank keeps its
last two, so a kill in the middle of writing the newest leaves the one before usable.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from clockfabric.errors import ClockfabricError

KEEP = 2
_NAME = re.compile(r"step(\d+)\.rank(\d+)\.pt")


class Checkpoints:
    def __init__(self, folder: Path | str, every: int):
        if every < 1:
            raise ClockfabricError(f"checkpoint every {every} steps: it must be at least 1")
        self.folder, self.every = Path(folder), every
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, completed: int, rank: int) -> Path:
        return self.folder / f"step{completed:08d}.rank{rank}.pt"

    def due(self, completed: int) -> bool:
        return completed > 0 and completed % self.every == 0

    def write(self, completed: int, rank: int, state: dict[str, Any]) -> None:
        """This rank's state after `completed` steps; its files older than the last KEEP go."""
        final = self.path(completed, rank)
        aside = final.with_suffix(".tmp")
        torch.save(state, aside)
        aside.replace(final)
        for old in sorted(self._steps(rank))[:-KEEP]:
            self.path(old, rank).unlink(missing_ok=True)

    def latest(self, world: int) -> int | None:
        """The last step every one of `world` ranks wrote a checkpoint at (None: none yet)."""
        complete = set.intersection(*(self._steps(rank) for rank in range(world))) if world else set()
        return max(complete, default=None)

    def read(self, completed: int, rank: int) -> dict[str, Any]:
        # weights_only=False: the state holds Python's RNG tuple; the files are the job's own
        return torch.load(self.path(completed, rank), weights_only=False)

    def _steps(self, rank: int) -> set[int]:
        found = (_NAME.fullmatch(p.name) for p in self.folder.glob(f"step*.rank{rank}.pt"))
        return {int(m.group(1)) for m in found if m and int(m.group(2)) == rank}
