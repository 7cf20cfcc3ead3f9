"""The spares' NCCL path on one GPU: two ranks and a spare on this machine, one rank killed.

    python scripts/gpu_spares.py [--steps 60] [--kill-at 20] [--folder DIR]

Each member runs examples/ddp_spares.py --device cuda under a TrainJob on local hosts (the
coordinator `clockfabric train run` uses), all on the current GPU. NCCL refuses two ranks of
one communicator on one GPU of one host, so each member gets its own NCCL_HOSTID: NCCL then
takes them for separate hosts and connects them over sockets (loopback). Rank 1 is killed
once every rank completed --kill-at steps; the spare takes its place. Prints the time from
the kill to the next step every rank completed, and whether the final parameters are equal
on every rank and to a failure-free run's (--no-reference skips that run).
Exits 2 with one line on a machine without CUDA.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

EXAMPLE = ROOT / "examples" / "ddp_spares.py"
RANKS, SPARES, VICTIM = ["g0", "g1"], ["g2"], 1


def cuda_missing() -> str | None:
    """Why this machine cannot run it, or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed; run make setup"
    if not torch.cuda.is_available():
        return f"no CUDA device here (torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'})"
    return None


def show(event: dict) -> None:
    detail = ", ".join(f"{k} {v}" for k, v in event.items() if k not in ("event", "time"))
    print(f"  {event['event']} {detail}", flush=True)


def run(folder: Path, steps: int, kill_at: int | None, timeout_s: float) -> tuple[list[dict], float | None]:
    """One job: its records, and when the victim was killed (None: no kill)."""
    from clockfabric.bench.spares.faults import wait_for_step
    from clockfabric.hosts.local import LocalHost
    from clockfabric.train import report
    from clockfabric.train.launch import TrainJob

    names = RANKS + (SPARES if kill_at is not None else [])
    hosts = {h: LocalHost(h, "127.0.0.1") for h in names}
    env = {"NCCL_SOCKET_IFNAME": os.environ.get("NCCL_SOCKET_IFNAME", "lo"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    job = TrainJob(hosts, RANKS, names[len(RANKS):], [str(EXAMPLE), "--device", "cuda", "--steps", str(steps)],
                   folder, env=env, runner=lambda host: ["env", f"NCCL_HOSTID=clockfabric-{host}", sys.executable],
                   on_event=show)
    job.start()
    killed = None
    try:
        if kill_at is not None:
            wait_for_step(lambda: report.records(folder), len(RANKS), kill_at, timeout_s=timeout_s,
                          alive=lambda: all(m.ended() is None for m in job.ranks))
            victim = job.ranks[VICTIM]
            assert victim.proc is not None
            killed = time.time()
            victim.proc.signal(9)
        if not job.wait(timeout_s):
            raise SystemExit(f"gpu_spares: the job did not complete in {timeout_s:g} s; logs in {folder}")
    finally:
        job.stop()
    return report.records(folder), killed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--kill-at", type=int, default=20, help="Kill rank 1 once every rank completed this step.")
    p.add_argument("--timeout", type=float, default=300.0, help="Each job's limit in seconds (default 300).")
    p.add_argument("--folder", default=None, help="Where the jobs' logs go (default: a new temporary folder).")
    p.add_argument("--no-reference", action="store_true", help="Skip the failure-free run.")
    args = p.parse_args(argv)
    if why := cuda_missing():
        print(f"gpu_spares: {why}: run it on a machine with a GPU", file=sys.stderr)
        return 2
    from clockfabric.train import report

    folder = Path(args.folder or tempfile.mkdtemp(prefix="gpu-spares-"))
    print(f"killed run ({folder / 'killed'}):", flush=True)
    recs, killed = run(folder / "killed", args.steps, args.kill_at, args.timeout)
    assert killed is not None
    took = report.recovery_s(recs, killed)
    digests = report.digests(recs)
    steps_ok = report.job_steps(recs) == list(range(args.steps))
    print(f"kill -> resumed: {took:.2f} s" if took is not None else "kill -> resumed: never", flush=True)
    print(f"every step completed once: {'yes' if steps_ok else 'no'}")
    print(f"params match across ranks: {'yes' if len(set(digests.values())) == 1 and len(digests) == 2 else 'no'}"
          f" {sorted(set(digests.values()))}")
    same = None
    if not args.no_reference:
        print(f"failure-free run ({folder / 'reference'}):", flush=True)
        ref = report.digests(run(folder / "reference", args.steps, None, args.timeout)[0])
        same = set(ref.values()) == set(digests.values()) and len(set(ref.values())) == 1
        print(f"params match the failure-free run: {'yes' if same else 'no'}")
    return 0 if took is not None and steps_ok and len(set(digests.values())) == 1 and same is not False else 1


if __name__ == "__main__":
    sys.exit(main())
