"""examples/ddp_train.py on torchft (the PyTorch project's fault-tolerance library), gloo, CPU.

The same MLP, data and seed as examples/ddp_spares.py. Each process is one torchft replica
group of one rank: its own TCPStore, a Manager that asks the lighthouse for a quorum every
step, torchft's DistributedDataParallel (its all-reduce goes through the Manager, over a
ProcessGroupGloo re-formed whenever the quorum changes) and its optimizer wrapper (the step
is applied only if every participant committed). A lost replica drops out of the next quorum
and the others carry on with fewer; a replica that joins late (a replacement) takes the
model and optimizer state from a peer over HTTP and then participates.

    TORCHFT_LIGHTHOUSE=http://ADDR:PORT RANK=R python examples/ddp_torchft.py --steps 40 --log r.jsonl

RANK (or --rank) names the replica: its batches are drawn for that index, as ddp_spares.py's
are for its rank. --log FILE gets JSON lines: {"rank", "step", "start", "duration_s",
"world", "loss"} per committed step, {"rank", "event": "not committed", "step"} for a step the quorum threw
away, then {"outcome": "completed", "params_sha256"}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import time
import traceback
from datetime import timedelta


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100, help="Training steps (default 100).")
    p.add_argument("--timeout", type=float, default=30.0, help="Collective timeout in seconds (default 30).")
    p.add_argument("--log", default=None, help="Write JSON lines here (one per step, then the outcome).")
    p.add_argument("--width", type=int, default=512, help="Hidden layer width (default 512).")
    p.add_argument("--depth", type=int, default=4, help="Linear layers (default 4).")
    p.add_argument("--inputs", type=int, default=256, help="Input features (default 256).")
    p.add_argument("--batch", type=int, default=32, help="Samples per rank per step (default 32).")
    p.add_argument("--threads", type=int, default=1, help="Torch CPU threads per rank (default 1).")
    p.add_argument("--min-replicas", type=int, default=2,
                   help="Fewest replicas a step may run with (default 2).")
    p.add_argument("--rank", type=int, default=None,
                   help="This replica's index, whose batches it draws (default: $RANK); a replacement "
                        "takes the index of the replica it replaces.")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.steps < 1 or args.depth < 1 or args.width < 1 or args.batch < 1 or args.timeout <= 0:
        p.error("--steps, --depth, --width and --batch must be at least 1, --timeout above zero")
    return args


class Log:
    def __init__(self, path: str | None):
        self.f = open(path, "a", buffering=1) if path else None  # line-buffered: a kill loses nothing

    def write(self, **fields) -> None:
        if self.f:
            self.f.write(json.dumps(fields) + "\n")


def _wrapper_class():
    """torchft's DistributedDataParallel with its comm hook mended: in torchft 0.2.0 a peer lost
    during the all-reduce makes the hook fail an assertion (the error is recorded, but the
    future it returns was never set), which crashes the survivors too. Here the hook hands back
    the unreduced gradients instead; the manager has recorded the error, so the step is not
    committed, as torchft intends."""
    import torch
    import torchft

    class Mended(torchft.DistributedDataParallel):
        @staticmethod
        def _comm_hook(state, bucket):
            work = state.allreduce(bucket.buffer())
            if not work.wait() or state.errored():
                fut = torch.futures.Future()
                fut.set_result(bucket.buffer())
                return fut
            return work.get_future()._fut

    return Mended


def train(args: argparse.Namespace, log: Log) -> None:
    import torch
    import torchft
    from torch import nn

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # the same initial weights everywhere: no sync at step 0
    layers: list[nn.Module] = []
    width_in = args.inputs
    for _ in range(args.depth - 1):
        layers += [nn.Linear(width_in, args.width), nn.ReLU()]
        width_in = args.width
    layers.append(nn.Linear(width_in, 10))
    module = nn.Sequential(*layers)
    inner = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    teacher = torch.randn(args.inputs, 10, generator=torch.Generator().manual_seed(args.seed + 1))
    rank = args.rank if args.rank is not None else int(os.environ["RANK"])

    def batch(position: int) -> tuple[torch.Tensor, torch.Tensor]:
        data = torch.Generator().manual_seed((args.seed * 1_000_003 + rank) * 1_000_003 + position)
        x = torch.randn(args.batch, args.inputs, generator=data)
        return x, (x @ teacher).argmax(dim=1)

    # a replica group of one: its own store, on this host's stable address (the hostname)
    address = socket.gethostname()
    store = torch.distributed.TCPStore(address, 0, is_master=True, wait_for_workers=False)
    limit = timedelta(seconds=args.timeout)
    manager = torchft.Manager(
        pg=torchft.ProcessGroupGloo(timeout=limit), min_replica_size=args.min_replicas,
        load_state_dict=lambda sd: (module.load_state_dict(sd["model"]), inner.load_state_dict(sd["optim"])),
        state_dict=lambda: {"model": module.state_dict(), "optim": inner.state_dict()},
        replica_id=f"replica{rank}", rank=0, world_size=1, store_addr=address, store_port=store.port,
        hostname=address, timeout=limit, quorum_timeout=limit, connect_timeout=limit, init_sync=False)
    model = _wrapper_class()(manager, module)
    optimizer = torchft.Optimizer(manager, inner)
    try:
        while manager.current_step() < args.steps:
            step, start = manager.current_step(), time.time()
            optimizer.zero_grad(set_to_none=True)  # asks the lighthouse for this step's quorum
            x, y = batch(step)
            loss = loss_fn(model(x), y)
            loss.backward()  # all-reduced over the quorum's participants
            optimizer.step()  # applied, and the step counted, only if every participant committed
            if manager.current_step() > step:
                log.write(rank=rank, step=step, start=start, duration_s=time.time() - start,
                          world=manager.num_participants(), loss=round(loss.item(), 5))
            else:
                log.write(rank=rank, event="not committed", step=step, time=time.time())
        digest = hashlib.sha256(b"".join(t.detach().contiguous().numpy().tobytes()
                                         for t in module.state_dict().values())).hexdigest()
        log.write(rank=rank, outcome="completed", steps=args.steps, time=time.time(), params_sha256=digest)
    finally:
        manager.shutdown(wait=False)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = Log(args.log)
    try:
        train(args, log)
    except BaseException as e:  # say so, then fail
        error = f"{type(e).__name__}: {e}".strip()[:500]
        log.write(outcome="crashed", error=error, time=time.time())
        traceback.print_exc()
        print(f"crashed: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as ddp_train.py: skip finalization, which torch's threads can abort
