"""DDP under the elastic loop: its gradient all-reduce and its forward, with a lost peer
recorded on the loop (`job.failed`) instead of raised, so the loop can undo and redo the step."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from clockfabric.train import backend as backends
from clockfabric.train import group

ONE_BUCKET_MB = 1 << 20  # more than any model: DDP then makes one bucket of all the gradients


def _done(tensor: torch.Tensor) -> torch.futures.Future:
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(tensor)
    return fut


def average(job, bucket):  # unannotated: DDP compares a hook's annotations to classes, these would be strings
    """DDP's averaging all-reduce on the current group, with a failure recorded, not raised.

    The gradients are all-reduced in one buffer in the module's parameter order, whatever order
    DDP's bucket holds them in (a new wrapper's first bucket is in definition order, later ones
    in the order gradients arrive): a ring's sums run in an order set by each value's offset,
    and bit-equal results across a re-formed group need the same offsets."""
    buffer = bucket.buffer()
    if job.failed:  # an earlier bucket of this step failed: the step is undone anyway
        return _done(buffer)
    sizes = [g.numel() for g in bucket.gradients()]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    order = sorted(range(len(sizes)), key=lambda i: job.order[bucket.parameters()[i]])
    flat = torch.cat([buffer[starts[i]:starts[i] + sizes[i]] for i in order]).div_(job.world)
    try:
        work = dist.all_reduce(flat, async_op=True)
        assert work is not None
        backends.wait(work, group.current())  # NCCL: raises here, its future would not
        fut = work.get_future()
    except RuntimeError:
        job.failed = True
        return _done(buffer)

    def finish(f: torch.futures.Future) -> torch.Tensor:
        try:
            f.wait()
        except Exception:  # a peer is gone: whatever gloo raised, the step is redone
            job.failed = True
            return buffer
        offset = 0
        for i in order:
            buffer[starts[i]:starts[i] + sizes[i]].copy_(flat[offset:offset + sizes[i]])
            offset += sizes[i]
        return buffer

    return fut.then(finish)


class Guarded(DistributedDataParallel):
    """DDP whose forward records a lost peer rather than raising it: the first forward after the
    first step broadcasts DDP's rebuilt bucket order, so a peer lost then fails the forward."""

    job: Any = None  # the Elastic loop whose step a lost peer fails

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        try:
            return super().forward(*inputs, **kwargs)
        except RuntimeError:
            # the module alone: a fault of the script's own raises again here, not swallowed
            out = self.module(*inputs, **kwargs)
            assert self.job is not None
            self.job.failed = True  # the step is undone
            return out
