"""ZeRO-1: each rank's optimizer shard, copied every step to a buddy rank's memory.

With `torch.distributed.optim.ZeroRedundancyOptimizer` a rank's optimizer state (momentum,
Adam moments) exists on that rank only, so no replica can hand it to a spare. After every
optimizer step each rank sends its shard to its buddy, the next rank round the ring, and
receives its predecessor's. The copy travels off the critical path: the shard's tensors are
copied into one flat byte tensor (no `torch.save`), sent with `isend`, and received with
`irecv` while the next step's forward and backward run; it is waited for only before the next
optimizer step (`settle`). Off the loop's critical path, not off the network: its bytes
share the link with the step's collectives (docs/spares.md). A copy becomes the held one only
once the step it was taken after has completed (`commit`, then `settle`), so a failed step's
copy never replaces the last good one. A spare that takes rank r is sent r's shard by r's
buddy (`hand_over`). Lost together, a rank and its buddy take that shard with them
(`ShardLost`).
"""

from __future__ import annotations

import datetime
import pickle
import struct
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer

from clockfabric.train import group

HEADER_TAG, PAYLOAD_TAG = 17, 18  # point-to-point tags: a copy's size, then the copy
SALVAGE_S = 1.0
KEPT = 2  # copies held: a copy still in flight when its sender was lost leaves the one before
NONE = -9  # no such step  # after a failed step, how long the last completed step's copy may still take to arrive


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


class _Slot(NamedTuple):
    """Where a tensor's bytes lie in a flat copy."""
    offset: int
    size: int
    dtype: torch.dtype
    shape: tuple[int, ...]


def flatten(state_dict: dict[str, Any], into: torch.Tensor | None = None) -> tuple[int, torch.Tensor]:
    """A state dict as one uint8 tensor: its skeleton (the dict, each tensor replaced by its
    _Slot, pickled) then every tensor's bytes. Returns (the skeleton's length, the tensor):
    `into` where it has the size (a copy no longer in use), else a new one."""
    parts: list[torch.Tensor] = []
    offset = 0

    def walk(value: Any) -> Any:
        nonlocal offset
        if isinstance(value, torch.Tensor):
            raw = value.detach().contiguous().reshape(-1).view(torch.uint8)
            parts.append(raw)
            slot = _Slot(offset, raw.numel(), value.dtype, tuple(value.shape))
            offset += raw.numel()
            return slot
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(walk(v) for v in value)
        return value

    skeleton = pickle.dumps(walk(state_dict))
    head = torch.frombuffer(bytearray(skeleton), dtype=torch.uint8)
    size = head.numel() + offset
    if into is None or into.numel() != size:
        into = torch.empty(size, dtype=torch.uint8)
    return len(skeleton), torch.cat([head, *parts], out=into)  # a copy: the live state changes next step


def unflatten(skeleton_len: int, flat: torch.Tensor) -> dict[str, Any]:
    """flatten's inverse, every tensor bit-equal and owning its memory."""
    # a peer rank of the same job wrote the skeleton: no bytes from outside the job are unpickled
    skeleton = pickle.loads(flat[:skeleton_len].numpy().tobytes())
    data = flat[skeleton_len:]

    def walk(value: Any) -> Any:
        if isinstance(value, _Slot):
            return data[value.offset:value.offset + value.size].clone().view(value.dtype).reshape(value.shape)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(walk(v) for v in value)
        return value

    return walk(skeleton)


@dataclass
class Copy:
    """A rank's shard as of `completed` steps, flattened."""
    completed: int
    skeleton_len: int
    flat: torch.Tensor

    def to_bytes(self) -> bytes:
        return struct.pack("<qq", self.completed, self.skeleton_len) + self.flat.numpy().tobytes()

    @classmethod
    def from_bytes(cls, blob: bytes) -> Copy:
        completed, skeleton_len = struct.unpack_from("<qq", blob)
        return cls(completed, skeleton_len, torch.frombuffer(bytearray(blob[16:]), dtype=torch.uint8))

    def state_dict(self) -> dict[str, Any]:
        return unflatten(self.skeleton_len, self.flat)


def _within(work: Any, timeout_s: float | None) -> None:
    if timeout_s is None:
        work.wait()
    else:
        work.wait(datetime.timedelta(seconds=timeout_s))


class Buddy:
    """This rank's side of the ring: its predecessor's shard, as last committed.

    Per step: `post` after the optimizer step (this rank's copy sent, the predecessor's size
    awaited), `receive` at the next step's start (the copy itself received while forward and
    backward run, by gloo's own threads: no Python thread, no GIL taken from the loop),
    `commit` once the step completed (that copy may be held), `settle` before the next
    optimizer step (both transfers done, the committed copy held). `cost_s` is the time these
    took on the critical path since the caller last zeroed it, `bytes` the copy's size. Buffers are reused while the
    shard keeps its size, so a step allocates none."""

    def __init__(self) -> None:
        self.copies: list[Copy] = []  # the last KEPT committed copies, oldest first
        self.cost_s = 0.0
        self.bytes = 0
        self._sending: list[Any] = []  # this rank's copy in flight: its works
        self._outgoing: torch.Tensor | None = None  # the copy being sent: refilled once it is sent
        self._header_out = torch.zeros(3, dtype=torch.int64)
        self._header = torch.zeros(3, dtype=torch.int64)  # the predecessor's: (completed, skeleton_len, size)
        self._header_work: Any = None
        self._payload_work: Any = None
        self._incoming: torch.Tensor | None = None
        self._free: torch.Tensor | None = None  # a copy no longer held: the next one is received into it
        self._committed = False

    def post(self, optimizer: ZeroRedundancyOptimizer, completed: int) -> None:
        """Send this rank's shard, as of `completed` steps, to the next rank; returns at once."""
        began = time.perf_counter()
        rank, world = dist.get_rank(), dist.get_world_size()
        skeleton_len, self._outgoing = flatten(optimizer.optim.state_dict(), into=self._outgoing)
        self._header_out = torch.tensor([completed, skeleton_len, self._outgoing.numel()], dtype=torch.int64)
        self._sending = [dist.isend(self._header_out, (rank + 1) % world, tag=HEADER_TAG),
                         dist.isend(self._outgoing, (rank + 1) % world, tag=PAYLOAD_TAG)]
        self._header_work = dist.irecv(self._header, (rank - 1) % world, tag=HEADER_TAG)
        self._payload_work, self._committed = None, False
        self.cost_s += time.perf_counter() - began
        self.bytes = self._outgoing.numel()

    def receive(self, timeout_s: float | None = None) -> None:
        """The predecessor's copy on its way: its size is in (the predecessor posted it when its
        optimizer step ended, as this rank did), so its bytes are received into a buffer of that
        size beside the step. Raises RuntimeError if the predecessor is gone."""
        if self._header_work is None or self._payload_work is not None:
            return
        began = time.perf_counter()
        _within(self._header_work, timeout_s)
        size = int(self._header[2])
        if self._free is None or self._free.numel() != size:
            self._free = torch.empty(size, dtype=torch.uint8)
        self._incoming, self._free = self._free, None
        self._payload_work = dist.irecv(self._incoming, (dist.get_rank() - 1) % dist.get_world_size(),
                                        tag=PAYLOAD_TAG)
        self.cost_s += time.perf_counter() - began

    @property
    def held(self) -> Copy | None:
        return self.copies[-1] if self.copies else None

    def commit(self) -> None:
        """The step completed here: the predecessor's copy of it may be held once it is in."""
        self._committed = self._header_work is not None

    def settle(self, timeout_s: float | None = None) -> None:
        """Both copies in flight done, the committed one held; raises RuntimeError if a peer is
        gone (or, given timeout_s, if they are not done by then)."""
        began = time.perf_counter()
        sending, committed = self._sending, self._committed
        self._sending, self._committed = [], False
        self.receive(timeout_s)  # before waiting on the sends: each waits for its receiver's receive
        for work in sending:
            _within(work, timeout_s)
        if self._header_work is not None:
            _within(self._payload_work, timeout_s)
            completed, skeleton_len, _ = (int(v) for v in self._header.tolist())
            arrived, self._incoming = self._incoming, None
            self._header_work = self._payload_work = None
            if committed and arrived is not None:
                held = [*self.copies, Copy(completed, skeleton_len, arrived)]
                self.copies = held[-KEPT:]
                self._free = held[0].flat if len(held) > KEPT else None  # the copy no longer held
            else:
                self._free = arrived  # an uncommitted copy is never held: its buffer is free
        self.cost_s += time.perf_counter() - began

    def exchange(self, optimizer: ZeroRedundancyOptimizer, completed: int) -> None:
        """The whole round at once (a group just formed): every member holds its predecessor's shard."""
        self.post(optimizer, completed)
        self.commit()
        self.settle()

    def close(self) -> None:
        """Before leaving the group (a step failed, or a new generation): the last completed
        step's copy is held if it arrives within SALVAGE_S; an uncommitted one is dropped."""
        if not self._committed:  # the failed step's copies: never held, not waited for
            self._drop()
            return
        try:
            self.settle(SALVAGE_S)
        except RuntimeError:  # its sender is gone: the copy before it stays held
            self._drop()

    def _drop(self) -> None:
        """Transfers abandoned: their buffers may still be written or read by the old group's
        threads, so none of them is reused."""
        self._sending, self._committed = [], False
        self._header_work = self._payload_work = None
        self._outgoing = self._incoming = self._free = None
        self._header = torch.zeros(3, dtype=torch.int64)

    def resume_at(self, counts: list[int], previous: int | None) -> int:
        """The step every member goes on from, agreed by all (previous: the step of this
        member's snapshot before its last completed one, if it has one)."""
        steps = [c.completed for c in self.copies][-KEPT:]
        mine = torch.tensor([NONE if previous is None else previous, *[NONE] * (KEPT - len(steps)), *steps])
        gathered = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, mine)
        rows = [[int(v) for v in g.tolist()] for g in gathered]
        return resume_at(counts, [r[0] for r in rows], [set(r[1:]) for r in rows])

    def hand_over(self, counts: list[int], at: int, optimizer: ZeroRedundancyOptimizer) -> int:
        """Each new member (count -1) receives its shard as of step `at` from its buddy's copy;
        the bytes sent."""
        rank, world = dist.get_rank(), dist.get_world_size()
        carried = 0
        for lost in [r for r, c in enumerate(counts) if c < 0]:
            buddy = (lost + 1) % world
            copy = next((c for c in self.copies if c.completed == at), None) if rank == buddy else None
            blob = group.broadcast_bytes(copy.to_bytes() if copy else None, buddy)
            carried += len(blob)
            if rank == lost:
                optimizer.optim.load_state_dict(Copy.from_bytes(blob).state_dict())
        return carried


def resume_at(counts: list[int], previous: list[int], held: list[set[int]]) -> int:
    """The step the members go on from: the most any completed (counts; -1 a new member) if
    every lost rank's buddy holds its shard as of then, else one fewer if those copies are
    from then and every survivor that completed more has its snapshot from before (previous)."""
    world = len(counts)
    survivors = [r for r, c in enumerate(counts) if c >= 0]
    lost = [r for r, c in enumerate(counts) if c < 0]
    if not survivors:
        raise ShardLost("ZeRO-1: every rank was lost, and every optimizer shard with them")
    for rank in lost:
        if counts[(rank + 1) % world] < 0:
            raise ShardLost(f"ZeRO-1: rank {rank} and its buddy rank {(rank + 1) % world} were both lost, "
                            f"and rank {rank}'s optimizer shard with them")
    top = max(counts)
    for at in (top, top - 1):
        if all(counts[r] == at or previous[r] == at for r in survivors) \
                and all(at in held[(r + 1) % world] for r in lost):
            return at
    copies = {r: sorted(held[(r + 1) % world]) for r in lost}
    raise ShardLost(f"ZeRO-1: no step every member holds: the survivors completed "
                    f"{sorted({counts[r] for r in survivors})} steps, the lost ranks' shards are held as of "
                    f"steps {copies}")
