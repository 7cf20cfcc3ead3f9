"""examples/ddp_train.py, made elastic: a lost rank is replaced by a spare, its state from peers.

The same MLP, data and DDP all-reduce over gloo; the training loop runs inside
`clockfabric.train.elastic`, which forms the process group itself (the script does not call
init_process_group), rebuilds DistributedDataParallel on each new group, and redoes a step
that a lost peer interrupted. Run it through the coordinator, which starts the ranks and the
spares on lab hosts:

    clockfabric train run --lab LAB --hosts h0,h1,h2 --spares h3 -- examples/ddp_spares.py --steps 100

The data are addressed by position: the batch of rank r at step s is drawn from a generator
seeded with (seed, r, s), so a spare that takes rank r at step s draws what the lost rank
would have. --log FILE gets JSON lines: {"rank", "step", "start", "duration_s", "loss", ...}
per completed step, {"event": "joined", "bytes", "form_s", "transfer_s", "wrap_s", ...} per group formed, then
{"outcome": "completed", "params_sha256": ...}. With --zero each step record also has
"buddy_s" and "buddy_bytes": the time this rank spent stepping its mirror of the previous
rank's optimizer shard, and the memory that mirror holds.

--device cuda trains on the current CUDA device; the wrapper then forms its groups with NCCL.

--checkpoint-dir DIR --checkpoint-every K: every rank also writes its state to DIR every K
steps; the job resumes from the last one when no member's memory holds a lost rank's state
(a ZeRO-1 rank lost with its buddy). --bare runs the same training without the wrapper
(init_process_group from torchrun's environment, as examples/ddp_train.py): the baseline the
wrapper's per-step cost is measured against.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100, help="Training steps (default 100).")
    p.add_argument("--timeout", type=float, default=30.0, help="Collective timeout in seconds (default 30).")
    p.add_argument("--log", "--log-file", dest="log", default=None,  # torchrun takes --log for its own
                   help="Write JSON lines here (one per step, then the outcome).")
    p.add_argument("--width", type=int, default=512, help="Hidden layer width (default 512).")
    p.add_argument("--depth", type=int, default=4, help="Linear layers (default 4).")
    p.add_argument("--inputs", type=int, default=256, help="Input features (default 256).")
    p.add_argument("--batch", type=int, default=32, help="Samples per rank per step (default 32).")
    p.add_argument("--threads", type=int, default=1, help="Torch CPU threads per rank (default 1).")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="Where the model trains (default cpu); cuda: the wrapper's group is NCCL.")
    p.add_argument("--zero", action="store_true",
                   help="ZeRO-1: each rank keeps its shard of the optimizer state (ZeroRedundancyOptimizer).")
    p.add_argument("--checkpoint-dir", default=None, help="Write each rank's state here every K steps.")
    p.add_argument("--checkpoint-every", type=int, default=10, help="K: steps between checkpoints (default 10).")
    p.add_argument("--bare", action="store_true",
                   help="Without the wrapper: a plain DDP (or ZeRO-1) job, launched as ddp_train.py is.")
    args = p.parse_args(argv)
    if args.checkpoint_every < 1:
        p.error("--checkpoint-every must be at least 1")
    if args.steps < 1 or args.depth < 1 or args.width < 1 or args.batch < 1 or args.timeout <= 0:
        p.error("--steps, --depth, --width and --batch must be at least 1, --timeout above zero")
    return args


class Log:
    def __init__(self, path: str | None):
        self.f = open(path, "a", buffering=1) if path else None  # line-buffered: a kill loses nothing

    def write(self, **fields) -> None:
        if self.f:
            self.f.write(json.dumps(fields) + "\n")


def train(args: argparse.Namespace, log: Log) -> str:
    import torch
    from torch import nn

    import clockfabric.train

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # the same initial weights everywhere
    layers: list[nn.Module] = []
    width_in = args.inputs
    for _ in range(args.depth - 1):
        layers += [nn.Linear(width_in, args.width), nn.ReLU()]
        width_in = args.width
    layers.append(nn.Linear(width_in, 10))
    module = nn.Sequential(*layers).to(args.device)  # made on the CPU first: the same weights on any device
    if args.zero:  # made once the group is formed: the wrapper calls this with the parameters
        from torch.distributed.optim import ZeroRedundancyOptimizer

        def opt(params):
            return ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.SGD, lr=0.05, momentum=0.9)
    else:
        opt = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    teacher = torch.randn(args.inputs, 10, generator=torch.Generator().manual_seed(args.seed + 1))

    def batch(position: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        data = torch.Generator().manual_seed((args.seed * 1_000_003 + rank) * 1_000_003 + position)
        x = torch.randn(args.batch, args.inputs, generator=data)
        return x.to(args.device), (x @ teacher).argmax(dim=1).to(args.device)

    if args.bare:
        return bare(args, module, opt, loss_fn, batch, log)
    with clockfabric.train.elastic(module, opt, batch, log=log.write, timeout_s=args.timeout,
                                   checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every) as job:
        for _step, (x, y) in job.steps(args.steps):
            job.optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(job.model(x), y)
            loss.backward()  # averaged over the job's current group; a lost peer marks the step for a redo
            job.optimizer.step()  # with --zero: the previous rank's shard on the mirror, then this rank's
            job.record(loss=round(loss.item(), 5))
        log.write(rank=job.rank, outcome="completed", steps=args.steps, time=time.time(),
                  params_sha256=job.digest())
    return "completed"


def bare(args: argparse.Namespace, module, opt, loss_fn, batch, log: Log) -> str:
    """The same steps with no wrapper: DDP over the group torchrun's environment describes."""
    import datetime

    import torch.distributed as dist

    import clockfabric.train.state
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    model = DistributedDataParallel(module)
    optimizer = opt(module.parameters()) if callable(opt) else opt
    for step in range(args.steps):
        start = time.time()
        x, y = batch(step, rank)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        log.write(rank=rank, step=step, start=start, duration_s=time.time() - start, loss=round(loss.item(), 5))
    dist.barrier()  # nobody leaves while a peer still needs it
    dist.destroy_process_group()
    log.write(rank=rank, outcome="completed", steps=args.steps, time=time.time(),
              params_sha256=clockfabric.train.state.digest(module))
    return "completed"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = Log(args.log)
    try:
        train(args, log)
    except BaseException as e:  # say so, then fail: the coordinator sees the exit status
        error = f"{type(e).__name__}: {e}".strip() if str(e) else type(e).__name__
        log.write(outcome="crashed", error=error, time=time.time())
        print(f"crashed: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as ddp_train.py: skip finalization, which torch's threads can abort
