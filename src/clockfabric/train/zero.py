"""ZeRO-1: each rank's optimizer shard, copied every step to a buddy rank's memory.

With `torch.distributed.optim.ZeroRedundancyOptimizer` a rank's optimizer state (momentum,
Adam moments) exists on that rank only, so no replica can hand it to a spare. After every
optimizer step each rank sends its shard to its buddy, the next rank round the ring, and
receives its predecessor's; the copy received becomes the held one only once the step has
completed everywhere it can be judged (`commit`), so a failed step's copy never replaces the
last good one. A spare that takes rank r is sent r's shard by r's buddy (`hand_over`). Lost
together, a rank and its buddy take that shard with them.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer

from clockfabric.train import group, state


class ShardLost(Exception):
    """A rank's optimizer shard is gone from every member: the job cannot go on from memory.
    Not a RuntimeError, so it is not taken for a peer lost while the group forms."""


def is_sharded(optimizer: Any) -> bool:
    return isinstance(optimizer, ZeroRedundancyOptimizer)


def local(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer over this rank's own parameters: ZeRO's inner one, else the optimizer."""
    return optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer


def rebind(optimizer: ZeroRedundancyOptimizer) -> None:
    """Point ZeRO at the re-formed default group (same rank index and world size, so its
    partition of the parameters does not change)."""
    optimizer.process_group = dist.group.WORLD


def _swap(payload: torch.Tensor, into: torch.Tensor, rank: int, world: int) -> None:
    sent = dist.isend(payload, (rank + 1) % world)
    received = dist.irecv(into, (rank - 1) % world)
    for work in (sent, received):
        assert work is not None
        work.wait()


class Buddy:
    """This rank's side of the ring: its predecessor's shard, as last committed."""

    def __init__(self) -> None:
        self.held: bytes | None = None
        self.incoming: bytes | None = None
        self.cost_s = 0.0
        self.bytes = 0

    def exchange(self, optimizer: ZeroRedundancyOptimizer) -> None:
        """Send this rank's shard to the next rank; receive the previous rank's (not yet held)."""
        began = time.time()
        rank, world = dist.get_rank(), dist.get_world_size()
        mine = state.to_bytes(optimizer.optim.state_dict())
        size = torch.zeros(1, dtype=torch.int64)
        _swap(torch.tensor([len(mine)], dtype=torch.int64), size, rank, world)
        theirs = torch.empty(int(size.item()), dtype=torch.uint8)
        _swap(torch.frombuffer(bytearray(mine), dtype=torch.uint8), theirs, rank, world)
        self.incoming = theirs.numpy().tobytes()
        self.cost_s, self.bytes = time.time() - began, len(mine)

    def commit(self) -> None:
        if self.incoming is not None:
            self.held, self.incoming = self.incoming, None

    def discard(self) -> None:
        self.incoming = None

    def hand_over(self, counts: list[int], optimizer: ZeroRedundancyOptimizer) -> int:
        """Each new member (count -1) receives its shard from its buddy's copy; the bytes sent."""
        rank, world = dist.get_rank(), dist.get_world_size()
        survivors = {c for c in counts if c >= 0}
        if len(survivors) > 1:
            raise ShardLost(f"ZeRO-1: the surviving ranks completed different steps {sorted(survivors)}: "
                               "a shard one step behind cannot be brought forward; restart from a checkpoint")
        carried = 0
        for lost in [r for r, c in enumerate(counts) if c < 0]:
            buddy = (lost + 1) % world
            if counts[buddy] < 0:
                raise ShardLost(f"ZeRO-1: rank {lost} and its buddy rank {buddy} were both lost, and "
                                   f"rank {lost}'s optimizer shard with them; restart from a checkpoint")
            blob = group.broadcast_bytes(self.held if rank == buddy else None, buddy)
            carried += len(blob)
            if rank == lost:
                optimizer.optim.load_state_dict(state.from_bytes(blob))
        return carried
