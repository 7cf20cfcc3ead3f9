"""One rank of the collective benchmark: `python -m clockfabric.collective.worker ...`.

Runs on a host (started through its Host by clockfabric.collective.run).
Connects its subflows, then for each size: warmup + timed iterations of the collective
(the options' collective: allreduce or alltoall), every element of every result checked against the
exactly known one. A barrier starts the warmup; from there iterations run back to back,
warmup and timed alike, as nccl-tests' do and as a job's collectives follow one another: a
barrier before every iteration would leave the links idle for its round trips, which under
load (the barrier's small messages queue behind another job's bytes) took 0.15-0.3 s per
iteration, time the other job's hosts could not fill. Each rank's iteration times are the
intervals between its iterations' ends (its own input reset and check included), so the
timings measure the steady state the warmup led into.

With --gate each size's warmup waits for a line on stdin, so the jobs sharing the fabric
begin it together. They are not stopped again before their timed iterations: a second
common start, on a fabric idle for the pause, put the jobs back through the transient the
warmup had taken them past, and the job that came out of it behind stayed behind for
several iterations. After its timings the job holds: untimed iterations go on until a last
line on stdin (every job sharing the fabric has its timings), so no job's last timed
iteration runs on a fabric the others have left.

Prints JSON lines on stdout: {"event": "connected"}, {"event": "ready"} (with --gate, per size),
{"event": "iter"} (rank 0, after each timed or warmup iteration), {"event": "result"}
per size, {"event": "holding"} (with --gate), {"event": "subflows"} (where each subflow ran,
on which spine the agent placed it, and what it carried, over the whole run), or {"event": "error"} before exiting 1.

All-reduce inputs are chosen so every partial sum is exact in float32 whatever the order of
additions: rank r holds ((i % 1021) - 510) / 4 * w_r at element i, w_r = r % 64 + 1, so the
sum is ((i % 1021) - 510) / 4 * sum(w), a multiple of 1/4 far below 2**22. Position (period
1021, prime) and rank (weight) both show in the value, so a misplaced segment or a rank
counted twice or never reads as wrong elements. All-to-all uses alltoall.alltoall_inputs /
alltoall_expected (values naming sender, receiver and index); its receive buffer is filled
with NaN before each iteration, so a block never written reads as wrong too.

The barrier is a tiny all-reduce (of the same algorithm for all-reduce, the ring for
all-to-all), so the rank connects to the union of the barrier's and the collective's peers.
"""

from __future__ import annotations

import argparse
import json
import math
import select
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import NoReturn

import numpy as np

from clockfabric.collective import alltoall, claims, ring, standby
from clockfabric.collective.options import CollectiveOptions
from clockfabric.collective.placement import Placement, job_id, learn_ports, share_windows
from clockfabric.collective.transport import Transport
from clockfabric.errors import ClockfabricError


def weight(rank: int) -> int:
    return rank % 64 + 1


def inputs(count: int, rank: int) -> np.ndarray:
    base = (np.arange(count, dtype=np.int64) % 1021 - 510).astype(np.float32) / 4
    return base * np.float32(weight(rank))


def expected(count: int, world: int) -> np.ndarray:
    return inputs(count, 0) * np.float32(sum(weight(r) for r in range(world)))


HOLD_CHECK_S = 2.0  # holding: untimed iterations between checks whether to stop (see hold())


def emit(**fields) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not usage + message
        sys.stderr.write(f"clockfabric collective worker: {message}\n")
        sys.exit(2)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = _Parser(prog="python -m clockfabric.collective.worker")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--options", default=None, metavar="JSON",
                   help="The run's CollectiveOptions (to_json()), port_base set (default: the defaults).")
    p.add_argument("--peer", action="append", default=[], metavar="NAME=ADDR[,ADDR...]",
                   help="Each rank in order: its name and its address in each path slot (plane).")
    p.add_argument("--groups", default="", help="Group (leaf) id of each rank, comma-separated (hier).")
    p.add_argument("--sizes", required=True,
                   help="Bytes per rank's (send) buffer, comma-separated: multiples of 4 (all-to-all: of 4 * world).")
    p.add_argument("--token", type=int, default=0)
    p.add_argument("--fleet", default="", help="The fleet this rank belongs to (marks the process as started for it).")
    p.add_argument("--gate", action="store_true",
                   help="Before each size's warmup, wait for a line on stdin; after the last size's timings "
                        "keep the fabric loaded until another line (the launcher starts and ends jobs that "
                        "share the fabric together).")
    p.add_argument("--agent", default="", metavar="ADDR",
                   help="This host's stable address, where its agent listens: learned placement asks it "
                        "which spines to take (none: spread on our own).")
    args = p.parse_args(argv)
    try:
        args.options = CollectiveOptions.from_json(args.options) if args.options else CollectiveOptions()
    except ClockfabricError as e:
        p.error(f"--options: {e}")
    if args.options.port_base is None:
        p.error("--options needs a port_base: rank r listens on port_base + r")
    if args.world < 2 or len(args.peer) != args.world:
        p.error(f"--world {args.world} needs at least 2 ranks and one --peer per rank (got {len(args.peer)})")
    if not 0 <= args.rank < args.world:
        p.error(f"--rank {args.rank} is outside 0..{args.world - 1}")
    try:
        args.names = [peer.split("=", 1)[0] for peer in args.peer]
        args.addresses = [peer.split("=", 1)[1].split(",") for peer in args.peer]
        args.sizes = [int(s) for s in args.sizes.split(",")]
        ids = [int(g) for g in args.groups.split(",")] if args.groups else [0] * args.world
    except (IndexError, ValueError):
        p.error("--peer needs NAME=ADDR[,ADDR...]; --sizes and --groups need integers, comma-separated")
    args.agent = (args.agent, claims.AGENT_PORT) if args.agent else None
    unit = 4 * args.world if args.options.collective == "alltoall" else 4  # all-to-all: one equal block per rank
    if any(s < unit or s % unit for s in args.sizes):
        what = f"4 * world = {unit} bytes (one float32 per rank)" if unit > 4 else "4 bytes (float32)"
        p.error(f"--sizes must be positive multiples of {what}; got {args.sizes}")
    if len(ids) != args.world:
        p.error(f"--groups needs one id per rank ({args.world}); got {len(ids)}")
    args.groups = [[r for r in range(args.world) if ids[r] == g] for g in dict.fromkeys(ids)]
    if args.options.algorithm == "hier" and len({len(g) for g in args.groups}) > 1:
        p.error(f"hier needs the same number of ranks in each group; got {[len(g) for g in args.groups]}")
    return args


def barrier(links: Transport, algorithm: str, groups: list[list[int]], world: int) -> None:
    """An all-reduce of one value per rank: no rank leaves before every rank has arrived."""
    ones = np.ones(world, dtype=np.float32)
    ring.run(algorithm, links, ones, groups)
    if not np.all(ones == world):
        raise ClockfabricError(f"barrier summed to {ones.tolist()}, not {world}: ranks are out of step")


def released() -> bool:
    """Has the launcher written its second line (or gone: end of file reads as one)?"""
    return bool(select.select([sys.stdin], [], [], 0)[0])


def anyone(links: Transport, args: argparse.Namespace, flag: bool, took_s: float) -> tuple[bool, float]:
    """Is `flag` set on any rank, and the longest `took_s` of any? An all-reduce of a flag and
    a time per rank, each in its own slot (so every sum is exact), so every rank gets the
    same answers and all stop after the same iteration."""
    w = args.world
    slots = np.zeros(2 * w, dtype=np.float32)
    slots[args.rank], slots[w + args.rank] = flag, took_s
    ring.run(barrier_algorithm(args), links, slots, args.groups)
    return bool(slots[:w].any()), float(slots[w:].max())


def hold(links: Transport, args: argparse.Namespace, reset: Step, once: Step) -> None:
    """Untimed iterations until the launcher's last line. Each check whether to stop is a
    small all-reduce which, under load, queues behind the other job's bytes (0.15-0.3 s in
    the lab), time in which the fabric would run lighter than during the other job's timings:
    so the ranks check only after about HOLD_CHECK_S of iterations, as long as the slowest
    iteration any rank has had. The batch at most doubles from one check to the next, so one
    quick first iteration cannot commit the ranks to a long batch."""
    every, slowest_s = 1, 0.0
    while True:
        started = time.perf_counter()
        for _ in range(every):
            reset()
            once()
        stop, took_s = anyone(links, args, released(), (time.perf_counter() - started) / every)
        if stop:
            return
        slowest_s = max(slowest_s, took_s, 1e-9)
        every = min(2 * every, math.ceil(HOLD_CHECK_S / slowest_s))


def barrier_algorithm(args: argparse.Namespace) -> str:
    return args.options.algorithm if args.options.collective == "allreduce" else "ring"


def collective_peers(args: argparse.Namespace) -> set[int]:
    """The ranks to connect to: the barrier's ring peers and the collective's."""
    peers = ring.peers(barrier_algorithm(args), args.rank, args.groups)
    if args.options.collective == "alltoall":
        peers |= alltoall.peers(args.options.algorithm, args.rank, range(args.world))
    return peers


Step = Callable[[], None]


def prepare(args: argparse.Namespace, count: int, links: Transport) -> tuple[Step, Step, np.ndarray, np.ndarray]:
    """For `count` elements per rank: (reset the buffers, run the collective once, its result, the exact result).
    Only the run is timed."""
    if args.options.collective == "alltoall":
        send = alltoall.alltoall_inputs(count, args.rank, args.world)
        recv = np.empty_like(send)
        return (lambda: recv.fill(np.nan),  # a block never received reads as wrong, not as the last iteration's
                lambda: alltoall.alltoall(links, send, recv, list(range(args.world)), args.options.algorithm,
                                          args.groups),
                recv, alltoall.alltoall_expected(count, args.rank, args.world))
    x = inputs(count, args.rank)
    work = np.empty_like(x)
    return (lambda: np.copyto(work, x), lambda: ring.run(args.options.algorithm, links, work, args.groups),
            work, expected(count, args.world))


def run(args: argparse.Namespace) -> None:
    started, opts = time.monotonic(), args.options
    peers = collective_peers(args)
    placement = learn_ports(args, peers) if opts.placement == "learned" else Placement()
    spines, n = placement.spines, opts.subflows
    with Transport(args.rank, args.addresses, port_base=opts.port_base, subflows=2 * n if opts.standby else n,
                   timeout_s=opts.timeout_s, names=args.names, token=args.token, scheduler=opts.scheduler,
                   source_ports=lambda peer, i: placement.ports.get((peer, i)), rcvbuf=opts.rcvbuf,
                   parked=range(n, 2 * n) if opts.standby else ()) as links:
        links.connect(peers)
        done = threading.Event()
        if opts.rcvbuf_budget and args.agent and spines:
            threading.Thread(target=share_windows, args=(links, args, spines, done), daemon=True,
                             name="share-windows").start()
        if placement.standbys:
            threading.Thread(target=standby.watch, args=(links, placement.standbys, done), daemon=True,
                             name="standby").start()
        emit(event="connected", rank=args.rank, connect_s=round(time.monotonic() - started, 4))
        for size in args.sizes:
            count = size // 4
            reset, once, got, want = prepare(args, count, links)
            if args.gate:
                emit(event="ready", rank=args.rank, size_bytes=size)
                if not sys.stdin.readline():
                    raise ClockfabricError("the launcher closed the gate before opening it")
            times, wrong = [], 0
            for it in range(opts.warmup + opts.iters):
                reset()
                if it == 0:
                    barrier(links, barrier_algorithm(args), args.groups, args.world)
                    t0 = time.perf_counter()
                once()
                wrong = max(wrong, int(np.count_nonzero(got != want)))
                now = time.perf_counter()
                elapsed, t0 = now - t0, now
                if it >= opts.warmup:
                    times.append(round(elapsed * 1e6, 1))
                if args.rank == 0:
                    emit(event="iter", size_bytes=size, iter=it)
            emit(event="result", rank=args.rank, size_bytes=size, count=count, times_us=times, wrong=wrong)
        if args.gate:
            emit(event="holding", rank=args.rank)
            hold(links, args, reset, once)
        done.set()
        stats = [{**row, "spine": spines.get((row["peer_rank"], row["subflow"]))} for row in links.stats()]
        emit(event="subflows", rank=args.rank, subflows=stats)
    if args.agent and opts.placement == "learned":
        claims.release(args.agent, job_id(args), source=args.agent[0])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    who = f"rank {args.rank} ({args.names[args.rank]})"
    try:
        run(args)
    except ClockfabricError as e:
        error = str(e)
    except Exception as e:  # noqa: BLE001 - a bug: keep the traceback for whoever reads stderr
        traceback.print_exc()
        error = f"{type(e).__name__}: {e}"
    else:
        return 0
    emit(event="error", rank=args.rank, error=error)
    sys.stderr.write(f"clockfabric collective worker {who}: {error}\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
