"""ZeRO-1: each rank's optimizer shard mirrored on a buddy rank, stepped there, never sent per step.

With `torch.distributed.optim.ZeroRedundancyOptimizer` a rank's optimizer state (momentum,
Adam moments) exists on that rank only, so no replica can hand it to a spare. But every rank
already holds what that state's next value is made from: the averaged gradients (DDP
all-reduces all of them before ZeRO's step) and the parameters before the step (ZeRO's
broadcasts leave them equal on every rank). So each rank's buddy, the next rank round the
ring, runs its predecessor's optimizer step as well, on a mirror: shadow tensors set to the
predecessor's parameters just before the step, given the same gradients, stepped by an
optimizer of the same class and hyperparameters. The same operations on the same bits give
the same bits, so the mirror's state stays equal to the predecessor's shard, bit for bit,
with no byte on the network per step. The cost is one more shard's optimizer step and its
memory (`Buddy.bytes`).

The mirror is part of the rank's own state (`Buddy.state_dict`): a step's snapshot holds it
and a failed step undoes it with the rest. A spare that takes rank r, or a survivor that
ended a step behind the others, is sent r's shard from its buddy's mirror (`hand_over`); once
a group has formed each member sends its shard to its successor's mirror (`exchange`), which
gives a new member its predecessor's shard. Lost together, a rank and its buddy take that
shard with them (`ShardLost`).
"""

from __future__ import annotations

import pickle
import time
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer

from clockfabric.train import group, state

HEADER_TAG, PAYLOAD_TAG = 17, 18  # point-to-point tags: a shard's size, then the shard
NONE = -9  # no such step


class ShardLost(Exception):
    """A rank's optimizer shard is gone from every member: the job cannot go on from memory.
    Not a RuntimeError, so it is not taken for a peer lost while the group forms. `reached`:
    the most steps any member completed."""

    reached = -1


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


class Buddy:
    """This rank's shard and its mirror of the previous rank's, stepped together.

    `step` before ZeRO's own step (the shadows must take the parameters before they change);
    `state_dict` / `load_state_dict` cover both shards, so the step's snapshot and its undo do
    too. `cost_s` is the time the mirror's steps took since the caller last zeroed it. A
    single rank has no predecessor to mirror: its buddy holds its shard alone."""

    def __init__(self, optimizer: ZeroRedundancyOptimizer) -> None:
        rank, world = dist.get_rank(), dist.get_world_size()
        self.zero, self.of = optimizer, (rank - 1) % world
        # ZeRO's own partition and constructor (private, no public equivalent): the mirror must
        # be built exactly as the predecessor's local optimizer was, group by group
        internals: Any = optimizer
        groups = internals._partition_parameters()[self.of] if world > 1 else []
        self.params = [p for g in groups for p in g["params"]]
        self.shadows = [p.detach().clone() for p in self.params]
        shadow_of = {id(p): s for p, s in zip(self.params, self.shadows, strict=True)}
        self.mirror: torch.optim.Optimizer | None = internals._optim_constructor(
            [{**g, "params": [shadow_of[id(p)] for p in g["params"]]} for g in groups],
            **internals._optim_defaults) if groups else None
        self._sync: Any = ZeroRedundancyOptimizer._sync_param_groups  # type: ignore[attr-defined]
        self.cost_s = 0.0

    @property
    def bytes(self) -> int:
        """The memory the mirror takes: the predecessor's parameters and its optimizer state."""
        held = self.mirror.state.values() if self.mirror else []
        tensors = [*self.shadows, *(v for s in held for v in s.values() if isinstance(v, torch.Tensor))]
        return sum(t.numel() * t.element_size() for t in tensors)

    def step(self) -> None:
        """The predecessor's optimizer step, on the mirror: the parameters as they are now (before
        ZeRO's step), the averaged gradients every rank holds, the hyperparameters as set now."""
        if self.mirror is None:
            return
        began = time.perf_counter()
        self._sync(self.zero.param_groups, self.mirror.param_groups)  # a schedule's learning rate
        with torch.no_grad():
            for param, shadow in zip(self.params, self.shadows, strict=True):
                shadow.copy_(param)
                shadow.grad = param.grad
        self.mirror.step()
        for shadow in self.shadows:
            shadow.grad = None  # not held past the step: the script frees its gradients
        self.cost_s += time.perf_counter() - began

    def state_dict(self) -> dict[str, Any]:
        """This rank's shard and the mirrored one (a step's snapshot holds both)."""
        return {"own": self.zero.optim.state_dict(), "mirror": self.mirror.state_dict() if self.mirror else None}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.zero.optim.load_state_dict(state_dict["own"])
        if self.mirror:
            self.mirror.load_state_dict(state_dict["mirror"])

    def exchange(self) -> int:
        """A group formed: each member's shard to its successor's mirror (a new member's
        predecessor's included); returns the bytes sent. Raises RuntimeError if a peer is gone."""
        rank, world = dist.get_rank(), dist.get_world_size()
        if self.mirror is None:
            return 0
        skeleton_len, flat = flatten(self.zero.optim.state_dict())
        header = torch.tensor([skeleton_len, flat.numel()], dtype=torch.int64)
        sends = [dist.isend(header, (rank + 1) % world, tag=HEADER_TAG),
                 dist.isend(flat, (rank + 1) % world, tag=PAYLOAD_TAG)]
        incoming = torch.zeros(2, dtype=torch.int64)
        dist.recv(incoming, self.of, tag=HEADER_TAG)
        arrived = torch.empty(int(incoming[1]), dtype=torch.uint8)
        dist.recv(arrived, self.of, tag=PAYLOAD_TAG)
        for work in sends:
            assert work is not None  # in the default group: a work, not None
            work.wait()
        self.mirror.load_state_dict(unflatten(int(incoming[0]), arrived))
        return flat.numel()

    def in_global_indexing(self, rank: int) -> dict[str, Any]:
        """The shard of `rank` (this rank's own, or the mirrored one) keyed by ZeRO's global
        parameter indices, with ZeRO's global param groups: a part of ZeRO's global state dict."""
        mirrored = rank != self.zero.rank
        assert not mirrored or (self.mirror is not None and rank == self.of)
        local = (self.mirror if mirrored else self.zero.optim).state_dict()  # type: ignore[union-attr]
        zero: Any = self.zero  # its partition and indexing (private, no public equivalent)
        part: dict[int, Any] = {}
        for group_state, partition in zip(local["param_groups"], zero._partition_parameters()[rank], strict=True):
            for index, param in zip(group_state["params"], partition["params"], strict=True):
                if index in local["state"]:
                    part[zero._param_to_index[param]] = local["state"][index]
        return {"state": part, "param_groups": torch.optim.Optimizer.state_dict(self.zero)["param_groups"]}

    def hand_over(self, rebuilt: list[int]) -> int:
        """Each rebuilt rank receives its shard from its buddy's mirror (every buddy's state is
        at the step the members go on from); the bytes sent."""
        rank, world = dist.get_rank(), dist.get_world_size()
        carried = 0
        for taker in rebuilt:
            buddy = (taker + 1) % world
            mine = state.to_bytes(self.mirror.state_dict()) if rank == buddy and self.mirror else None
            blob = group.broadcast_bytes(mine, buddy)
            carried += len(blob)
            if rank == taker:
                self.zero.optim.load_state_dict(state.from_bytes(blob))
        return carried


class Plan(NamedTuple):
    """How the members go on, agreed by all (`agree`)."""
    at: int  # the step
    world: int  # the size of the partition the shards are in (the last group's)
    member: dict[int, int]  # each surviving shard's rank in the last group -> its member's rank now
    rebuilt: list[int]  # last-group ranks whose shard comes from their buddy's mirror

    @property
    def source(self) -> int:
        """A member that holds the step: the parameters, generators and step come from it."""
        return min(self.member[r] for r in range(self.world) if r not in self.rebuilt)

    @property
    def resharded(self) -> bool:
        """The group is of another size, or its members moved: ZeRO is made again."""
        return self.world != dist.get_world_size() or any(r != m for r, m in self.member.items())

    def gather(self, buddy: Buddy, superseded: group.Superseding = group.never) -> tuple[dict[str, Any], int]:
        """Every shard on every member, as ZeRO's global state dict (what `state_dict` gives
        after `consolidate_state_dict`), for a ZeRO made for this group to load; the bytes."""
        merged: dict[str, Any] = {"state": {}, "param_groups": None}
        sent = 0
        for rank in range(self.world):
            holder = self.member[(rank + 1) % self.world if rank in self.rebuilt else rank]
            mine = state.to_bytes(buddy.in_global_indexing(rank)) if dist.get_rank() == holder else None
            blob = group.broadcast_bytes(mine, holder, superseded)
            part, sent = state.from_bytes(blob), sent + len(blob)
            merged["state"].update(part["state"])
            merged["param_groups"] = part["param_groups"]
        merged["state"] = dict(sorted(merged["state"].items()))
        return merged, sent


def agree(buddy: Buddy, completed: int, previous: int | None,
          superseded: group.Superseding = group.never) -> Plan:
    """The plan every member goes on by: each member's rank in the last group, that group's
    size, its count of completed steps and its previous snapshot's step, gathered (a new
    member, count -1, has none), and `resume_at` over the last group's ranks."""
    survivor = completed >= 0
    rows = group.gather_ints([buddy.zero.rank if survivor else -1, buddy.zero.world_size if survivor else -1,
                              completed, NONE if previous is None else previous], superseded)
    world = max(row[1] for row in rows)
    if world < 1:
        raise ShardLost("ZeRO-1: every rank was lost, and every optimizer shard with them")
    counts, before, member = [-1] * world, [NONE] * world, {}
    for now, (last, _, count, prev) in enumerate(rows):
        if last >= 0:
            counts[last], before[last], member[last] = count, prev, now
    try:
        at, rebuilt = resume_at(counts, before)
    except ShardLost as lost:
        lost.reached = max(counts)
        raise
    return Plan(at, world, member, rebuilt)


def resume_at(counts: list[int], previous: list[int]) -> tuple[int, list[int]]:
    """The step the members go on from, and the ranks rebuilt to it (counts: each member's
    completed steps, -1 a new one; previous: the step of each one's snapshot before its last
    completed step). A survivor holds its own shard and its mirror of its predecessor's as of
    its count and its previous snapshot's step. The most any completed, if every rank that does
    not hold it (a lost one, a survivor a step behind) has a buddy that does: that rank's shard
    then comes from its buddy's mirror, the rest of its state from a member that holds the step.
    Else one step fewer on the same terms, the one step redone."""
    world = len(counts)
    if all(c < 0 for c in counts):
        raise ShardLost("ZeRO-1: every rank was lost, and every optimizer shard with them")
    for rank in (r for r, c in enumerate(counts) if c < 0):
        if counts[(rank + 1) % world] < 0:
            raise ShardLost(f"ZeRO-1: rank {rank} and its buddy rank {(rank + 1) % world} were both lost, "
                            f"and rank {rank}'s optimizer shard with them")

    def holds(rank: int, at: int) -> bool:
        return counts[rank] >= 0 and at in (counts[rank], previous[rank])

    top = max(counts)
    for at in (top, top - 1):
        rebuilt = [r for r in range(world) if not holds(r, at)]
        if all(holds((r + 1) % world, at) for r in rebuilt):
            return at, rebuilt
    survivors = [r for r, c in enumerate(counts) if c >= 0]
    raise ShardLost(f"ZeRO-1: no step every member holds: the survivors completed "
                    f"{sorted({counts[r] for r in survivors})} steps, with snapshots from steps "
                    f"{sorted({previous[r] for r in survivors} - {NONE})}")
