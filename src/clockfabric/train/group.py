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
# well under a second; one lost inside it leaves the others waiting this long, not the store's
# default five minutes, before they go on to the next generation.
RENDEZVOUS_S = 5.0


def form(store_path: str, rank: int, world: int, timeout_s: float) -> None:
    """Leave the current group, if any, and join the generation whose store is store_path
    (timeout_s: the collectives' timeout)."""
    if dist.is_initialized():
        dist.destroy_process_group()
    store = dist.FileStore(store_path, world)
    store.set_timeout(datetime.timedelta(seconds=RENDEZVOUS_S))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))


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
    dist.broadcast(payload, source)
    return payload.numpy().tobytes()
