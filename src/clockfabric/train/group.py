"""The job's process group, formed anew for each generation, and what is sent over it.

Each generation rendezvouses in its own store (a FileStore at a fresh path, so no key of an
earlier generation is ever read), as torchft re-forms its groups with a new store prefix:
every member destroys the old group and initialises the new one with the same rank index and
world size. On NCCL the same sequence holds (abort the communicator, init a new one from the
new store); only the transfer tensors would live on the GPU.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

# Every member had marked itself ready before the rendezvous (control.wait_ready), so it takes
# well under a second. While the group forms and the state is carried, each operation may take
# this long (the state goes in CHUNK pieces, each well within it): a member lost meanwhile
# costs the others this, not the store's default five minutes, nor the collective timeout
# (gloo's send to a peer that died mid-transfer waits the timeout out: seen at 30 s).
FORM_S = 5.0
CHUNK = 16 << 20


def form(store_path: str, rank: int, world: int, timeout_s: float = FORM_S) -> None:
    """Leave the current group, if any, and join the generation whose store is store_path, its
    rendezvous and operations bounded by timeout_s until `settle`."""
    if dist.is_initialized():
        dist.destroy_process_group()
    limit = datetime.timedelta(seconds=timeout_s)
    store = dist.FileStore(store_path, world)
    store.set_timeout(limit)
    try:
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=limit)
    except RuntimeError:
        # a failed init still counted a group, and the next group's name (its keys in the store)
        # must match a fresh spare's: reset the count as destroy_process_group does
        dist.distributed_c10d._world.group_count = 0
        raise


def settle(timeout_s: float) -> None:
    """The group formed and the state carried: the collectives' own timeout from now on."""
    dist.distributed_c10d._set_pg_timeout(datetime.timedelta(seconds=timeout_s))


def most_advanced(completed: int) -> tuple[int, list[int]]:
    """Every member's count of completed steps gathered: (the source rank, every rank's count).

    The source is the lowest rank of those that completed the most steps: its state holds every
    step any member completed, so none is lost. A replacement rank counts -1."""
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, torch.tensor([completed], dtype=torch.int64))
    values = [int(c.item()) for c in counts]
    return values.index(max(values)), values


def broadcast_bytes(data: bytes | None, source: int) -> bytes:
    """The source's bytes, on every member (data is ignored elsewhere)."""
    size = torch.tensor([len(data) if dist.get_rank() == source and data is not None else 0], dtype=torch.int64)
    dist.broadcast(size, source)
    if dist.get_rank() == source and data is not None:
        payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    else:
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
    for start in range(0, payload.numel(), CHUNK):
        dist.broadcast(payload[start:start + CHUNK], source)
    return payload.numpy().tobytes()
