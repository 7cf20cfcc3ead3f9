"""ZeRO-1: each rank's optimizer shard, copied every step to a buddy rank's memory.

With `torch.distributed.optim.ZeroRedundancyOptimizer` a rank's optimizer state (momentum,
Adam moments) exists on that rank only, so no replica can hand it to a spare. After every
optimizer step each rank sends its shard to its buddy, the next rank round the ring, and
receives its predecessor's. The copy travels off the critical path: the shard's tensors are
copied into one flat byte tensor (no `torch.save`), sent with `isend`, and received with
`irecv` while the next step's forward and backward run; it is waited for only before the next
optimizer step (`settle`). A copy becomes the held one only once the step it was taken after
has completed (`commit`, then `settle`), so a failed step's copy never replaces the last good
one. A spare that takes rank r is sent r's shard by r's buddy (`hand_over`). Lost together, a
rank and its buddy take that shard with them (`ShardLost`).
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
SALVAGE_S = 1.0  # after a failed step, how long the last completed step's copy may still take to arrive


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


def flatten(state_dict: dict[str, Any]) -> tuple[int, torch.Tensor]:
    """A state dict as one uint8 tensor: its skeleton (the dict, each tensor replaced by its
    _Slot, pickled) then every tensor's bytes. Returns (the skeleton's length, the tensor)."""
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
    return len(skeleton), torch.cat([head, *parts])  # a copy: the live state changes next step


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

    Per step: `post` after the optimizer step (this rank's copy sent, the predecessor's header
    awaited), `commit` once the step completed (the header in, the copy's receive posted),
    `settle` before the next optimizer step (both transfers done, the copy held). `cost_s` is
    the time these took on the step's critical path, `bytes` the copy's size."""

    def __init__(self) -> None:
        self.held: Copy | None = None
        self.cost_s = 0.0
        self.bytes = 0
        self._sending: list[Any] = []  # this rank's copy in flight: its works and their buffers
        self._header: tuple[torch.Tensor, Any] | None = None
        self._receiving: tuple[int, int, torch.Tensor, Any] | None = None  # completed, skeleton, buffer, work
        self._error: str | None = None

    def post(self, optimizer: ZeroRedundancyOptimizer, completed: int) -> None:
        """Send this rank's shard, as of `completed` steps, to the next rank; returns at once."""
        began = time.perf_counter()
        rank, world = dist.get_rank(), dist.get_world_size()
        skeleton_len, payload = flatten(optimizer.optim.state_dict())
        header = torch.tensor([completed, skeleton_len, payload.numel()], dtype=torch.int64)
        self._sending = [dist.isend(header, (rank + 1) % world, tag=HEADER_TAG),
                         dist.isend(payload, (rank + 1) % world, tag=PAYLOAD_TAG), header, payload]
        incoming = torch.zeros(3, dtype=torch.int64)
        self._header = (incoming, dist.irecv(incoming, (rank - 1) % world, tag=HEADER_TAG))
        self.cost_s, self.bytes = time.perf_counter() - began, payload.numel()

    def commit(self) -> None:
        """The step completed here: the predecessor's copy of it may be held once it is in."""
        if self._header is None:
            return
        began = time.perf_counter()
        incoming, work = self._header
        self._header = None
        try:
            work.wait()  # the predecessor sent it as its optimizer step ended, as this rank's did
            completed, skeleton_len, size = (int(v) for v in incoming.tolist())
            buffer = torch.empty(size, dtype=torch.uint8)
            self._receiving = (completed, skeleton_len, buffer,
                               dist.irecv(buffer, (dist.get_rank() - 1) % dist.get_world_size(), tag=PAYLOAD_TAG))
        except RuntimeError as e:  # a peer is gone: the next settle fails the step
            self._error = str(e)
        self.cost_s += time.perf_counter() - began

    def settle(self, timeout_s: float | None = None) -> None:
        """Both copies in flight done, the received one held; raises RuntimeError if a peer is gone."""
        began = time.perf_counter()
        error, self._error = self._error, None
        sending, receiving = self._sending[:2], self._receiving
        self._sending, self._receiving = [], None
        if error:
            raise RuntimeError(error)
        for work in sending:
            _within(work, timeout_s)
        if receiving is not None:
            completed, skeleton_len, buffer, work = receiving
            _within(work, timeout_s)
            self.held = Copy(completed, skeleton_len, buffer)
        self.cost_s += time.perf_counter() - began

    def exchange(self, optimizer: ZeroRedundancyOptimizer, completed: int) -> None:
        """The whole round at once (a group just formed): every member holds its predecessor's shard."""
        self.post(optimizer, completed)
        self.commit()
        self.settle()

    def close(self) -> None:
        """Before leaving the group (a step failed, or a new generation): the last completed
        step's copy is held if it arrives within SALVAGE_S; an uncommitted one is dropped."""
        self._header = None
        if self._receiving is None:
            self._sending, self._error = [], None
            return
        try:
            self.settle(SALVAGE_S)
        except RuntimeError:  # its sender is gone: the copy before it stays held
            self._sending, self._receiving = [], None

    def hand_over(self, counts: list[int], optimizer: ZeroRedundancyOptimizer) -> int:
        """Each new member (count -1) receives its shard from its buddy's copy; the bytes sent."""
        rank, world = dist.get_rank(), dist.get_world_size()
        survivors = {c for c in counts if c >= 0}
        if not survivors:
            raise ShardLost("ZeRO-1: every rank was lost, and every optimizer shard with them")
        if len(survivors) > 1:
            raise ShardLost(f"ZeRO-1: the surviving ranks completed different steps {sorted(survivors)}: "
                            "a shard one step behind cannot be brought forward")
        at = survivors.pop()
        carried = 0
        for lost in [r for r, c in enumerate(counts) if c < 0]:
            buddy = (lost + 1) % world
            if counts[buddy] < 0:
                raise ShardLost(f"ZeRO-1: rank {lost} and its buddy rank {buddy} were both lost, and "
                                f"rank {lost}'s optimizer shard with them")
            current = self.held is not None and self.held.completed == at
            mine = self.held.to_bytes() if rank == buddy and current and self.held else b""
            blob = group.broadcast_bytes(mine if rank == buddy else None, buddy)
            if not blob:
                raise ShardLost(f"ZeRO-1: rank {buddy}'s copy of rank {lost}'s optimizer shard is not "
                                f"from step {at}: it did not arrive before rank {lost} was lost")
            carried += len(blob)
            if rank == lost:
                optimizer.optim.load_state_dict(Copy.from_bytes(blob).state_dict())
        return carried
