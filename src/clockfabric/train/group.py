"""The job's process group, formed anew for each generation, and what is sent over it.

Each generation rendezvouses in its own store (a fresh prefix on the job's board, so no key of
an earlier generation is ever read), as torchft re-forms its groups with a new store prefix:
every member destroys the old group and initialises the new one with the same rank index and
world size. On NCCL the same sequence holds (abort the communicator, init a new one from the
new store), the transfer tensors on the GPU (train.backend).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from clockfabric.train import backend as backends

# Every member had marked itself ready before the rendezvous (control.wait_ready), so it takes
# well under a second. While the group forms and the state is carried, each operation may take
# this long (the state goes in CHUNK pieces, each well within it): a member lost meanwhile
# costs the others this, not the store's default five minutes, nor the collective timeout
# (gloo's send to a peer that died mid-transfer waits the timeout out: seen at 30 s).
FORM_S = 5.0
CHUNK = 16 << 20
# Gloo waits this many times the group's timeout for a pair's first connection (the listening
# side's wait in its tcp transport, pair.h), so a member that died after publishing its address
# held the others 25 s under a 5 s timeout. The group is made with timeout FORM_S / CONNECT_WAITS,
# which bounds that wait by FORM_S; gloo's wait for the peers' addresses gets the same fifth,
# so the members first meet in the store (ARRIVED), bounded by FORM_S, and then publish together.
CONNECT_WAITS = 5
ARRIVED = "clockfabric/arrived"
# Gloo does not fail an operation whose bytes are partly sent or received when its connection
# fails: its pair signals the operations queued on it, but not the one it is writing (tx) or
# reading (rx), so that one waits out its own timeout (FORM_S), however the socket was shut.
# On a slow link a 16 MiB piece is partly on the wire nearly all the time: a spare killed during
# the transfer cost the survivors the full 5 s. So the transfer's operations run asynchronously,
# polled every POLL_S, and are abandoned as soon as the coordinator issues a newer generation.
POLL_S = 0.005
# Abandoned groups and their operations: kept referenced until those operations end (at their
# timeout), since destroying a gloo group joins its threads, which would wait for them, and the
# operations write into tensors that must outlive them.
_abandoned: list[tuple[Any, list[Any]]] = []
Superseding = Callable[[], bool]  # whether a newer generation was issued
_backend = backends.GLOO  # the current group's


class Superseded(RuntimeError):
    """A newer generation was issued while this group carried the state: its operations are
    abandoned (a RuntimeError, as gloo's own failures, so the caller moves on alike)."""


def never() -> bool:
    return False


def form(store: Any, rank: int, world: int, timeout_s: float = FORM_S, backend: str = backends.GLOO) -> None:
    """Leave the current group, if any, and join the generation whose store is `store`: the
    rendezvous and the connections bounded by timeout_s, and so is each operation until `settle`."""
    global _backend
    leave()
    options = backends.prepare(backend)
    _backend = backend
    limit = datetime.timedelta(seconds=timeout_s)
    store.set_timeout(limit)
    if store.add(ARRIVED, 1) == world:
        store.set(f"{ARRIVED}/all", "1")
    store.wait([f"{ARRIVED}/all"])  # a RuntimeError past the timeout, as gloo's own waits
    try:
        # CONNECT_WAITS is gloo's; NCCL's timeout is its operations' only
        init = limit / CONNECT_WAITS if backend == backends.GLOO else limit
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=init, **options)
    except RuntimeError:
        # a failed init still counted a group, and the next group's name (its keys in the store)
        # must match a fresh spare's: reset the count as destroy_process_group does
        dist.distributed_c10d._world.group_count = 0
        raise
    backends.set_timeout(timeout_s)  # the state transfer's operations


def leave() -> None:
    """Destroy the current group, if any (it waits for the group's operations still running,
    except those abandoned: their group is kept until they end)."""
    _abandoned[:] = [(pg, works) for pg, works in _abandoned if not all(w.is_completed() for w in works)]
    if dist.is_initialized():
        backends.abort(dist.distributed_c10d._get_default_group())  # NCCL: a lost peer's comm, else a no-op
        dist.destroy_process_group()


def _finish(work: Any, superseded: Superseding) -> None:
    """Wait for an asynchronous operation of the group; abandon it, and the group, as soon as
    a newer generation is issued. Its own error (a peer gone, its timeout) is raised as is."""
    while not work.is_completed():
        if superseded():
            _abandoned.append((dist.distributed_c10d._get_default_group(), [work]))
            raise Superseded("a newer generation was issued while the state was carried: the transfer is abandoned")
        time.sleep(POLL_S)
    work.wait()


def settle(timeout_s: float) -> None:
    """The group formed and the state carried: the collectives' own timeout from now on (on
    NCCL, its watchdog's)."""
    backends.set_timeout(timeout_s)


def current() -> str:
    """The backend of the group formed last."""
    return _backend


def gather_ints(values: list[int], superseded: Superseding = never) -> list[list[int]]:
    """Every member's values (as many on each), in rank order; Superseded as soon as
    superseded() says a newer generation was issued."""
    mine = torch.tensor(values, dtype=torch.int64, device=backends.device(_backend))
    rows = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    _finish(dist.all_gather(rows, mine, async_op=True), superseded)
    return [[int(v) for v in row.tolist()] for row in rows]


def most_advanced(completed: int, superseded: Superseding = never) -> tuple[int, list[int]]:
    """Every member's count of completed steps gathered: (the source rank, every rank's count).

    The source is the lowest rank of those that completed the most steps: its state holds every
    step any member completed, so none is lost. A replacement rank counts -1."""
    values = [row[0] for row in gather_ints([completed], superseded)]
    return values.index(max(values)), values


def broadcast_bytes(data: bytes | None, source: int, superseded: Superseding = never) -> bytes:
    """The source's bytes, on every member (data is ignored elsewhere); Superseded as soon as
    superseded() says a newer generation was issued."""
    on = backends.device(_backend)
    size = torch.tensor([len(data) if dist.get_rank() == source and data is not None else 0], dtype=torch.int64,
                        device=on)
    _finish(dist.broadcast(size, source, async_op=True), superseded)
    if dist.get_rank() == source and data is not None:
        payload = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(on)
    else:
        payload = torch.empty(int(size.item()), dtype=torch.uint8, device=on)
    for start in range(0, payload.numel(), CHUNK):
        _finish(dist.broadcast(payload[start:start + CHUNK], source, async_op=True), superseded)
    return payload.cpu().numpy().tobytes()
