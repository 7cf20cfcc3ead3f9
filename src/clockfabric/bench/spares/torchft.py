"""torchft, in the spares benchmark's harness: the PyTorch project's fault tolerance on gloo.

examples/ddp_torchft.py runs one replica per rank host; torchft's lighthouse (the
`torchft_lighthouse` binary its wheel installs) runs on the spare host, its heartbeat
timeout the coordinator's detection time (2 s), so both are judged on the same budget. The
same failures are injected (bench.spares.faults). A killed replica is relaunched on the spare
host at once, as torchelastic would on its exit, and joins the quorum, its state fetched from
a peer; a frozen or cut-off one is not (its process has not exited): the survivors carry on
without it. Figures: failure -> next completed step (every survivor completed a step that
started after the failure), completed steps lost, the world size of that step, and when a
replacement first completed a step.
"""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clockfabric.bench.spares import faults as spares_faults
from clockfabric.errors import ClockfabricError
from clockfabric.lab import job, process
from clockfabric.lab.exec import command
from clockfabric.lab.state import Lab
from clockfabric.train import report

HEARTBEAT_MS = 2000  # the lighthouse's: a replica silent this long leaves the quorum
JOIN_MS = 500  # how long the lighthouse waits for stragglers before it forms a quorum


def missing() -> str | None:
    """Why torchft cannot run here (None if it can)."""
    if importlib.util.find_spec("torchft") is None:
        return "torchft is not installed (make setup installs the job extra)"
    if not lighthouse_binary().is_file():
        return f"no {lighthouse_binary()} (torchft's wheel installs it)"
    return None


def lighthouse_binary() -> Path:
    return Path(sys.executable).parent / "torchft_lighthouse"


def lighthouse(lab: Lab, host: str, folder: Path, min_replicas: int) -> tuple[subprocess.Popen, str]:
    """torchft's lighthouse on host; the process and its http://ADDR:PORT."""
    port = job.free_port(lab, host)
    argv = [str(lighthouse_binary()), "--bind", f"[::]:{port}", "--min_replicas", str(min_replicas),
            "--heartbeat_timeout_ms", str(HEARTBEAT_MS), "--join_timeout_ms", str(JOIN_MS)]
    proc = process.spawn(command(lab, host, argv), log=folder / "lighthouse.out", new_session=True,
                         stdin=subprocess.DEVNULL)
    lab.register(proc.pid, f"torchft lighthouse on {host}")
    return proc, f"http://{lab.topology.hosts[host].address}:{port}"


def figures(survivors: list[list[dict[str, Any]]], replacement: list[dict[str, Any]],
            failed_at: float) -> dict[str, float]:
    """From the survivors' step records (and a replacement's): recovery, loss, world size after.

    recovery_s: the failure to every survivor having completed a step that started after it;
    steps_lost: completed steps (every survivor's) that were done again after the failure;
    rejoined_s: the failure to the replacement's first completed step (-1: none)."""
    after, reached = [], -1
    for recs in survivors:
        steps = [r for r in recs if "duration_s" in r]
        later = [r for r in steps if r["start"] > failed_at]
        if not later:
            raise ClockfabricError("a surviving torchft replica completed no step after the failure")
        after.append(later[0])
        reached = max(reached, max((r["step"] for r in steps if r["start"] + r["duration_s"] <= failed_at),
                                   default=-1))
    first = min(r["step"] for r in after)
    joined = [r["start"] + r["duration_s"] for r in replacement if "duration_s" in r]
    return {"recovery_s": max(r["start"] + r["duration_s"] for r in after) - failed_at,
            "steps_lost": float(max(0, reached + 1 - first)), "world_after": float(min(r["world"] for r in after)),
            "rejoined_s": min(joined) - failed_at if joined else -1.0}


def torchft_run(lab: Lab, ranks: list[str], spare: str, script: Path, args: list[str], folder: Path, *,
                kind: str, fail_at: int, victim: int = 1) -> dict[str, float]:
    """One failure of kind, injected in the victim's replica once every replica completed fail_at."""
    folder.mkdir(parents=True, exist_ok=True)
    beacon, address = lighthouse(lab, spare, folder, min_replicas=len(ranks) - 1)
    env = {"TORCHFT_LIGHTHOUSE": address}
    replicas = job.start(lab, ranks, [str(script), *args], folder, env=env)
    replacement = None
    try:
        spares_faults.wait_for_step(lambda: report.records(folder), len(ranks), fail_at,
                                    alive=lambda: all(p.poll() is None for p in replicas.procs))
        failed_at = spares_faults.inject(lab, kind, ranks[victim], replicas.pids[victim], replicas.logs[victim])
        if kind in (spares_faults.KILLED, spares_faults.MID_STEP):
            replacement = job.start(lab, [spare], [str(script), *args, "--rank", str(victim)],
                                    folder / "replacement", env=env)
        deadline = time.monotonic() + 300
        while any(p.poll() is None for i, p in enumerate(replicas.procs) if i != victim):
            if time.monotonic() > deadline:
                raise ClockfabricError(f"the torchft job did not complete; see {folder}")
            time.sleep(0.1)
    finally:
        replicas.stop(grace_s=0.5)
        if replacement is not None:
            replacement.stop(grace_s=0.5)
        process.stop([beacon], grace_s=0.5)
        spares_faults.heal(lab, kind, ranks[victim])
    logs = [job.read_log(p) for i, p in enumerate(replicas.logs) if i != victim]
    if not all(r.get("outcome") == "completed" for recs in logs for r in recs[-1:]):
        raise ClockfabricError(f"a surviving torchft replica did not complete; see {folder}")
    return figures(logs, job.read_log(replacement.logs[0]) if replacement else [], failed_at) | {
        "step_s": statistics.median(r["duration_s"] for recs in logs for r in recs
                                    if "duration_s" in r and r["start"] + r["duration_s"] < failed_at)}


def torchft_schedule(lab: Lab, ranks: list[str], spare: str, script: Path, args: list[str], folder: Path, *,
                     at: list[float], kind: str = spares_faults.KILLED, victim: int = 1, limit_s: float = 900,
                     tell: Callable[[str], None] = lambda line: None) -> tuple[list[dict[str, Any]], list[float]]:
    """The victim's replica killed (`kind`: between steps or mid-step) `at` seconds (each) after
    the first step began, relaunched at
    once on a free host (the spare, then the host the last kill freed) as torchelastic would on
    its exit; each kill told as it lands. Every replica's step records, and when each kill happened."""
    if kind not in (spares_faults.KILLED, spares_faults.MID_STEP):
        raise ClockfabricError(f"torchft's harness relaunches a killed replica only, not a {kind} one")
    folder.mkdir(parents=True, exist_ok=True)
    beacon, address = lighthouse(lab, spare, folder, min_replicas=len(ranks) - 1)
    env = {"TORCHFT_LIGHTHOUSE": address}
    replicas = job.start(lab, ranks, [str(script), *args], folder, env=env)

    def alive() -> bool:
        return any(p.poll() is None for run in started for p in run.procs)

    holder: tuple[subprocess.Popen, Path, str] = (replicas.procs[victim], replicas.logs[victim], ranks[victim])
    started, failures, free = [replicas], [], spare
    deadline = time.monotonic() + limit_s
    try:
        spares_faults.wait_for_step(lambda: report.records(folder), len(ranks), 0,
                                    alive=lambda: all(p.poll() is None for p in replicas.procs))
        began = min(r["start"] for r in report.records(folder) if "duration_s" in r)
        for n, offset in enumerate(at):
            while time.time() < began + offset and alive() and holder[0].poll() is None:
                time.sleep(0.05)
            if not alive() or holder[0].poll() is not None:
                break  # the job completed before this failure was due
            failures.append(spares_faults.inject(lab, kind, holder[2], holder[0].pid, holder[1]))
            freed = holder[2]
            tell(f"torchft: {kind} replica {victim} on {freed} at {failures[-1] - began:.1f} s")
            again = job.start(lab, [free], [str(script), *args, "--rank", str(victim)],
                              folder / f"replacement{n}", env=env)
            started.append(again)
            holder, free = (again.procs[0], again.logs[0], free), freed
        while alive():
            if time.monotonic() > deadline:
                raise ClockfabricError(f"the torchft job did not complete; see {folder}")
            time.sleep(0.1)
    finally:
        for run in started:
            run.stop(grace_s=0.5)
        process.stop([beacon], grace_s=0.5)
    recs = [r for run in started for p in run.logs for r in job.read_log(p)]
    return recs, failures

