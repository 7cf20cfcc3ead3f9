"""The collectives' backend, which follows the module's device, and what NCCL needs apart.

Parameters on CUDA: NCCL, with the state transfer's tensors on that device; else gloo. On
NCCL (torch 2.x's ProcessGroupNCCL):

- the group's timeout (`_set_pg_timeout`) is the watchdog's limit for every later collective;
- TORCH_NCCL_BLOCKING_WAIT=1 makes `work.wait()` block and, past the timeout or on a NCCL
  error, abort the communicator and raise in the calling thread; without it the watchdog's
  default handling (TORCH_NCCL_ASYNC_ERROR_HANDLING=3, SkipCleanUp) ends the process.
  TORCH_NCCL_ASYNC_ERROR_HANDLING=0 keeps the watchdog from tearing down as well (torch turns
  it off under blocking wait anyway; `_abort_process_group` asks for 0). Both are read when
  the group is made, so they are set before it;
- a group left after a lost peer is aborted (`ProcessGroup.abort`, ncclCommAbort on each
  communicator) before it is destroyed: destroying alone finalizes the communicators, which
  waits on the peer. An aborted communicator's finalize and destroy are skipped by torch.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import MutableMapping
from typing import Any

import torch
import torch.distributed as dist

GLOO, NCCL = "gloo", "nccl"
NCCL_ENV = {"TORCH_NCCL_BLOCKING_WAIT": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}


def for_module(module: torch.nn.Module) -> str:
    """NCCL where the module's parameters are on CUDA, gloo otherwise (none: gloo)."""
    first = next(iter(module.parameters()), None)
    return NCCL if first is not None and first.device.type == "cuda" else GLOO


def device(backend: str) -> torch.device:
    """Where tensors sent over the backend live: NCCL sends only CUDA tensors."""
    return torch.device("cuda", torch.cuda.current_device()) if backend == NCCL else torch.device("cpu")


def prepare(backend: str, env: MutableMapping[str, str] = os.environ) -> dict[str, Any]:
    """Before the group is made: NCCL's error handling set so a failed or timed-out collective
    raises; the keyword arguments init_process_group takes for this backend."""
    if backend != NCCL:
        return {}
    env.update(NCCL_ENV)  # not setdefault: the watchdog's default would end the process on a lost peer
    return {"device_id": device(NCCL)}  # bound to the device now: every rank's comm on its own GPU


def set_timeout(seconds: float) -> None:
    """The current group's timeout for every later operation: gloo's own waits, NCCL's watchdog
    and blocking wait alike (torch applies it to the group's NCCL or gloo backend)."""
    dist.distributed_c10d._set_pg_timeout(datetime.timedelta(seconds=seconds))


def wait(work: Any, backend: str) -> None:
    """NCCL marks a collective's future done once it is queued: its work's blocking wait is what
    raises a failed or timed-out one (gloo's future carries the error itself)."""
    if backend == NCCL:
        work.wait()


def abort(pg: Any) -> None:
    """A NCCL group's communicators aborted, so destroying the group waits on no lost peer."""
    if dist.get_backend(pg) != NCCL:
        return
    try:
        pg.abort()
    except RuntimeError:  # already aborted by its own blocking wait: destroy it all the same
        pass


def synchronize(backend: str) -> None:
    """A step's CUDA work done, so its measured time (the bound's input) is the device's too."""
    if backend == NCCL:
        torch.cuda.synchronize()
