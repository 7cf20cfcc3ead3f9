"""A real PyTorch DistributedDataParallel job, small enough for a lab on one machine.

An MLP classifier learns a fixed random "teacher" on generated, seeded data. With the
defaults it has 0.66M parameters: each step all-reduces 2.6 MB of gradients, a ring
sends about 4 MB out of each of 4 ranks, about 0.32 s on 100 Mbit/s links, against some
20 ms of compute: the job is network-bound. CPU only, gloo backend, one rank per
process; rendezvous by environment, like torchrun: MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE.

    MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 RANK=0 WORLD_SIZE=4 \
        python examples/ddp_train.py --steps 100 --timeout 30 --log rank0.jsonl

Gloo binds to the address that this host's hostname resolves to (or GLOO_SOCKET_IFNAME's
first address). In the lab, `clockfabric.lab.job` runs each rank with its hostname set to
the host's stable address (10.0.0.N on lo), so the job's connections survive a NIC going
down when the routes move.

--log FILE gets JSON lines, flushed as they happen:
    {"rank": 0, "event": "ready", "time": ..., "launched": ..., "import_s": ..., "rendezvous_s": ...,
     "init_s": ..., "hostname": ..., "address": ...}                                    once set up
    {"rank": 0, "step": 0, "start": <time.time()>, "duration_s": 0.31, "cpu_s": 0.02, "loss": 2.30}  each step
    {"rank": 0, "outcome": "completed", "steps": N, "total_s": ..., "time": ..., "cpu_s": ...}    at the end
or, on any exception, {"rank": 0, "outcome": "crashed", "error": "...", ...} and exit status 1.
Once the outcome is written the rank exits at once, without the interpreter's finalization.
"""

from __future__ import annotations

import time

LAUNCHED = time.time()  # before importing torch: startup includes the (slow) import

import argparse
import datetime
import json
import os
import socket
import sys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100, help="Training steps (default 100).")
    p.add_argument("--timeout", type=float, default=None,
                   help="Collective timeout in seconds, passed to init_process_group (default: gloo's).")
    p.add_argument("--log", default=None, help="Write JSON lines here (one per step, then the outcome).")
    p.add_argument("--width", type=int, default=512, help="Hidden layer width (default 512).")
    p.add_argument("--depth", type=int, default=4, help="Linear layers (default 4).")
    p.add_argument("--inputs", type=int, default=256, help="Input features (default 256).")
    p.add_argument("--batch", type=int, default=32, help="Samples per rank per step (default 32).")
    p.add_argument("--threads", type=int, default=1,
                   help="Torch CPU threads per rank (default 1: lab ranks share a few cores).")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", default=None,
                   help="Resume from this file if it exists; rank 0 writes it every --every steps.")
    p.add_argument("--every", type=int, default=10, help="Steps between checkpoints (default 10).")
    args = p.parse_args(argv)
    if args.steps < 1 or args.depth < 1 or args.width < 1 or args.batch < 1:
        p.error("--steps, --depth, --width and --batch must be at least 1")
    if args.every < 1:
        p.error("--every must be at least 1")
    if args.timeout is not None and args.timeout <= 0:
        p.error("--timeout must be above zero")
    return args


class Log:
    def __init__(self, path: str | None, rank: int):
        self.rank = rank
        self.f = open(path, "a", buffering=1) if path else None  # line-buffered: a kill loses nothing

    def write(self, **fields) -> None:
        if self.f:
            self.f.write(json.dumps({"rank": self.rank, **fields}) + "\n")


def train(args: argparse.Namespace, log: Log) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    imported = time.time()
    torch.set_num_threads(args.threads)
    kwargs = {"timeout": datetime.timedelta(seconds=args.timeout)} if args.timeout else {}
    dist.init_process_group("gloo", **kwargs)  # env:// rendezvous
    joined = time.time()
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    layers: list[nn.Module] = []
    width_in = args.inputs
    for _ in range(args.depth - 1):
        layers += [nn.Linear(width_in, args.width), nn.ReLU()]
        width_in = args.width
    layers.append(nn.Linear(width_in, 10))
    model = DistributedDataParallel(nn.Sequential(*layers))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    teacher = torch.randn(args.inputs, 10, generator=torch.Generator().manual_seed(args.seed + 1))
    data = torch.Generator().manual_seed(args.seed * 1000 + rank + 2)  # each rank its own shard

    hostname = socket.gethostname()
    try:
        address = socket.gethostbyname(hostname)
    except OSError:
        address = None
    params = sum(p.numel() for p in model.parameters())
    log.write(event="ready", time=time.time(), launched=LAUNCHED, import_s=imported - LAUNCHED,
              rendezvous_s=joined - imported, init_s=time.time() - LAUNCHED,
              world_size=world, params=params, hostname=hostname, address=address)

    first = resume(args.checkpoint, model.module, opt, log)
    for _ in range(first):  # the data generator where it was at that step
        torch.randn(args.batch, args.inputs, generator=data)
    for step in range(first, args.steps):
        start, cpu = time.time(), time.process_time()
        x = torch.randn(args.batch, args.inputs, generator=data)
        y = (x @ teacher).argmax(dim=1)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()  # DDP all-reduces the gradients here, over gloo
        opt.step()
        log.write(step=step, start=start, duration_s=time.time() - start,
                  cpu_s=round(time.process_time() - cpu, 4), loss=round(loss.item(), 5))
        if args.checkpoint and rank == 0 and (step + 1) % args.every == 0:
            save(args.checkpoint, model.module, opt, step + 1, log)
    dist.barrier()  # nobody leaves while a peer still needs it
    dist.destroy_process_group()


def save(path: str, module, opt, completed: int, log: Log) -> None:
    """The model, the optimizer and the count of completed steps, replaced atomically."""
    import torch

    began = time.time()
    tmp = f"{path}.tmp"
    torch.save({"model": module.state_dict(), "optimizer": opt.state_dict(), "step": completed}, tmp)
    os.replace(tmp, path)
    log.write(event="checkpoint", step=completed, time=time.time(), checkpoint_s=time.time() - began)


def resume(path: str | None, module, opt, log: Log) -> int:
    """The step to start at: the checkpoint's, loaded into module and opt, or 0 without one."""
    import torch

    if not path or not os.path.exists(path):
        return 0
    began = time.time()
    saved = torch.load(path, weights_only=True)
    module.load_state_dict(saved["model"])
    opt.load_state_dict(saved["optimizer"])
    log.write(event="resumed", step=saved["step"], time=time.time(), load_s=time.time() - began)
    return int(saved["step"])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    log = Log(args.log, rank)
    try:
        train(args, log)
    except BaseException as e:  # a collective timeout, a peer gone, Ctrl-C: say so, then fail
        error = f"{type(e).__name__}: {e}".strip() if str(e) else type(e).__name__
        log.write(outcome="crashed", error=error, time=time.time(), total_s=time.time() - LAUNCHED)
        print(f"rank {rank}: crashed: {error}", file=sys.stderr, flush=True)
        return 1
    log.write(outcome="completed", steps=args.steps, time=time.time(), total_s=time.time() - LAUNCHED,
              cpu_s=round(time.process_time(), 3))
    return 0


if __name__ == "__main__":
    code = main()
    # Everything is logged and flushed by now. Skip the interpreter's finalization: torch's C++
    # threads can abort it ("terminate called without an active exception", exit status 134;
    # 1 run in 60 of 4 ranks here), which would turn a completed job into a failed one.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
