"""What users run today, in the spares benchmark's harness: restarts from a disk checkpoint.

Plain DDP (examples/ddp_train.py) writes a checkpoint every K steps. Rank 1's host fails (any
of bench.spares_faults' kinds); as torchrun's agent does with `--max-restarts`, the job is
relaunched whole once a worker exits: a killed rank exits at once, but a frozen or cut-off
one does not, so the agent learns of it only when its peers' collective times out (the job's
own `--timeout`) and they exit with the error. The other workers are then stopped and the job
relaunched, on the same hosts after a kill and with the spare host in the failed one's place
after a frozen or cut-off host (as a scheduler replaces a node); it loads the last checkpoint
and redoes the steps after it. Its figures are those of the elastic job: failure -> next new
completed step, and the completed steps lost; `goodput` turns either into the effective
training time ratio with one failure every period.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from clockfabric.bench import spares_faults
from clockfabric.bench.spares_faults import KILLED, MID_STEP
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


def restart_run(lab: Lab, hosts: list[str], script: Path, args: list[str], folder: Path, *,
                every: int, kill_at: int, kind: str = KILLED, spare: str | None = None) -> dict[str, float]:
    """One failure of `kind` on rank 1's host once every rank completed kill_at, the job relaunched
    once a worker exits (exit_s after the failure); spare takes the host's place unless it was a kill."""
    if kind not in (KILLED, MID_STEP) and spare is None:
        raise ClockfabricError(f"a restart after a {kind} host needs a spare host to relaunch on")
    checkpoint = folder / "checkpoint.pt"
    argv = [str(script), *args, "--checkpoint", str(checkpoint), "--every", str(every)]
    first = job.start(lab, hosts, argv, folder / "attempt0")
    try:
        deadline = time.monotonic() + 120
        while max(step_ends([job.read_log(p) for p in first.logs]), default=-1) < kill_at:
            if time.monotonic() > deadline or not first.running():
                raise ClockfabricError(f"the checkpointing job never reached step {kill_at}; see {folder}")
            time.sleep(0.02)
        failed = spares_faults.inject(lab, kind, hosts[VICTIM], first.pids[VICTIM], first.logs[VICTIM])
        deadline = time.monotonic() + EXIT_WAIT_S
        while all(p.poll() is None for p in first.procs):  # the agent acts on a worker's exit only
            if time.monotonic() > deadline:
                raise ClockfabricError(f"no worker exited within {EXIT_WAIT_S} s of the {kind} failure; see {folder}")
            time.sleep(0.02)
        exited = time.time()
    finally:
        first.stop(grace_s=0.5)  # the agent stops the other workers as soon as one fails
        spares_faults.heal(lab, kind, hosts[VICTIM])
    before = step_ends([job.read_log(p) for p in first.logs])
    again = list(hosts)
    if kind not in (KILLED, MID_STEP):
        assert spare is not None  # checked above
        again[VICTIM] = spare
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
