"""What users run today, in the spares benchmark's harness: restarts from a disk checkpoint.

Plain DDP (examples/ddp_train.py) writes a checkpoint every K steps. Rank 1's host fails (any
of bench.spares.faults' kinds); as torchrun's agent does with `--max-restarts`, the job is
relaunched whole once a worker exits: a killed rank exits at once, but a frozen or cut-off
one does not, so the agent learns of it only when its peers' collective times out (the job's
own `--timeout`) and they exit with the error. The other workers are then stopped and the job
relaunched, on the same hosts after a kill and with the spare host in the failed one's place
after a frozen or cut-off host (as a scheduler replaces a node); it loads the last checkpoint
and redoes the steps after it. Its figures are those of the elastic job: failure -> next new
completed step, and the completed steps lost; `goodput` turns either into the effective
training time ratio with one failure every period. `restart_schedule` takes several failures
on a schedule of wall time, relaunching after each (the measured goodput, bench.spares.goodput).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clockfabric.bench.spares import faults as spares_faults
from clockfabric.bench.spares.faults import KILLED, MID_STEP
from clockfabric.errors import ClockfabricError
from clockfabric.lab import job
from clockfabric.lab.state import Lab

VICTIM = 1  # the rank whose host fails
EXIT_WAIT_S = 180  # a frozen or cut-off rank's peers exit at their collective timeout, well within this


def step_ends(ranks: list[list[dict[str, Any]]]) -> dict[int, float]:
    """step -> when every rank had completed it (steps some rank did not complete are left out)."""
    ends: dict[int, list[float]] = {}
    for recs in ranks:
        for r in recs:
            if "duration_s" in r:
                ends.setdefault(r["step"], []).append(r["start"] + r["duration_s"])
    return {step: max(t) for step, t in ends.items() if len(t) == len(ranks)}


def restart_figures(before: dict[int, float], after: dict[int, float], failed: float,
                    resumed_at: int) -> dict[str, float]:
    """From the step ends of the failed attempt and of the relaunched one: recovery and loss.

    recovery_s: from the failure to the first step the job had not completed before it;
    steps_lost: completed steps redone, those after the checkpoint the relaunch loaded."""
    reached = max((s for s, t in before.items() if t <= failed), default=-1)
    new = after.get(reached + 1)
    if new is None:
        raise ClockfabricError(f"the relaunched job never completed step {reached + 1}")
    return {"recovery_s": new - failed, "steps_lost": float(reached + 1 - resumed_at),
            "restart_s": min(after.values()) - failed}


def goodput(lost_s: float, period_s: float, overhead: float) -> float:
    """Effective training time ratio with one failure every period_s: each failure costs lost_s
    (beyond the step a failure-free job would have taken), and every step overhead times a
    plain step's time (1.0: none)."""
    return max(0.0, 1.0 - lost_s / period_s) / overhead


def await_due(run: job.Job, due: Callable[[], bool], timeout_s: float) -> bool:
    """Poll until due(); False if the attempt ended first (or timeout_s passed, which raises)."""
    deadline = time.monotonic() + timeout_s
    while not due():
        if not run.running():
            return False
        if time.monotonic() > deadline:
            raise ClockfabricError(f"the checkpointing job never reached its failure within {timeout_s:.0f} s")
        time.sleep(0.02)
    return True


def fail_until_exit(lab: Lab, run: job.Job, kind: str, host: str) -> tuple[float, float]:
    """Fail rank VICTIM (on host) with kind; wait for a worker to exit, as the agent acts on a
    worker's exit only. When the failure began, and when a worker exited."""
    failed = spares_faults.inject(lab, kind, host, run.pids[VICTIM], run.logs[VICTIM])
    deadline = time.monotonic() + EXIT_WAIT_S
    while all(p.poll() is None for p in run.procs):
        if time.monotonic() > deadline:
            raise ClockfabricError(f"no worker exited within {EXIT_WAIT_S} s of the {kind} failure")
        time.sleep(0.02)
    return failed, time.time()


def relaunch_hosts(hosts: list[str], kind: str, spare: str | None) -> tuple[list[str], str | None]:
    """Where the relaunch runs, and the spare after it: the same hosts after a kill; after a
    frozen or cut-off host, the spare in its place, the failed host (healed) the spare next."""
    if kind in (KILLED, MID_STEP):
        return list(hosts), spare
    if spare is None:
        raise ClockfabricError(f"a restart after a {kind} host needs a spare host to relaunch on")
    again = list(hosts)
    again[VICTIM], spare = spare, hosts[VICTIM]
    return again, spare


def restart_run(lab: Lab, hosts: list[str], script: Path, args: list[str], folder: Path, *,
                every: int, kill_at: int, kind: str = KILLED, spare: str | None = None) -> dict[str, float]:
    """One failure of `kind` on rank 1's host once every rank completed kill_at, the job relaunched
    once a worker exits (exit_s after the failure); spare takes the host's place unless it was a kill."""
    again, _ = relaunch_hosts(hosts, kind, spare)
    checkpoint = folder / "checkpoint.pt"
    argv = [str(script), *args, "--checkpoint", str(checkpoint), "--every", str(every)]
    first = job.start(lab, hosts, argv, folder / "attempt0")
    try:
        if not await_due(first, lambda: max(step_ends([job.read_log(p) for p in first.logs]), default=-1) >= kill_at,
                         120):
            raise ClockfabricError(f"the checkpointing job never reached step {kill_at}; see {folder}")
        failed, exited = fail_until_exit(lab, first, kind, hosts[VICTIM])
    finally:
        first.stop(grace_s=0.5)  # the agent stops the other workers as soon as one fails
        spares_faults.heal(lab, kind, hosts[VICTIM])
    before = step_ends([job.read_log(p) for p in first.logs])
    second = job.start(lab, again, argv, folder / "attempt1")
    try:
        result = second.wait(300, stall_s=60)
    finally:
        second.stop()
    if result.outcome != "completed":
        raise ClockfabricError(f"the relaunched job did not complete: {result.error or result.outcome}")
    logs = [job.read_log(p) for p in second.logs]
    resumed = next((r["step"] for r in logs[0] if r.get("event") == "resumed"), 0)
    saves = [r["checkpoint_s"] for recs in ([job.read_log(p) for p in first.logs] + logs)
             for r in recs if r.get("event") == "checkpoint"]
    return restart_figures(before, step_ends(logs), failed, resumed) | {
        "checkpoint_s": statistics.median(saves) if saves else 0.0, "exit_s": exited - failed}


def first_start(logs: list[Path]) -> float | None:
    """When the first step of any rank began (None before one has)."""
    return min((r["start"] for p in logs for r in job.read_log(p) if "duration_s" in r), default=None)


def restart_schedule(lab: Lab, hosts: list[str], script: Path, args: list[str], folder: Path, *, every: int,
                     at: list[float], kind: str = KILLED, spare: str | None = None,
                     limit_s: float = 900, tell: Callable[[str], None] = lambda line: None,
                     ) -> tuple[list[dict[str, Any]], list[float]]:
    """Failures of `kind` on the host of rank 1, `at` seconds (each) after the first step began,
    the job relaunched from its checkpoint after each, until it completes; each failure told as
    it lands. Every attempt's step records (folder/attemptN), and when each failure began."""
    checkpoint = folder / "checkpoint.pt"
    argv = [str(script), *args, "--checkpoint", str(checkpoint), "--every", str(every)]
    deadline, hosts, failures = time.monotonic() + limit_s, list(hosts), []
    began: float | None = None
    for n in range(len(at) + 1):
        run, victim = job.start(lab, hosts, argv, folder / f"attempt{n}"), hosts[VICTIM]
        try:
            began = began or wait_first_step(run)
            due = began + at[n] if n < len(at) else None
            if due is not None and await_due(run, lambda: time.time() >= due,  # noqa: B023 - awaited here
                                             deadline - time.monotonic()):
                failures.append(fail_until_exit(lab, run, kind, victim)[0])
                tell(f"checkpoint restarts: {kind} rank {VICTIM} on {victim} at {failures[-1] - began:.1f} s")
            else:
                result = run.wait(max(1.0, deadline - time.monotonic()), stall_s=60)
                if result.outcome != "completed":
                    raise ClockfabricError(f"the checkpointing job did not complete: {result.error or result.outcome}")
                break
        finally:
            run.stop(grace_s=0.5)  # the agent stops the other workers as soon as one fails
            spares_faults.heal(lab, kind, victim)
        hosts, spare = relaunch_hosts(hosts, kind, spare)
    recs = [r for p in sorted(folder.glob("attempt*/rank*.jsonl")) for r in job.read_log(p)]
    return recs, failures


def wait_first_step(run: job.Job, timeout_s: float = 120) -> float:
    """When the job's first step began, once one has."""
    if not await_due(run, lambda: first_start(run.logs) is not None, timeout_s):
        raise ClockfabricError("the checkpointing job ended before its first step")
    began = first_start(run.logs)
    assert began is not None
    return began
