"""`clockfabric bench spares`: a killed rank replaced by a spare, on one lab in one run.

Figures: failure -> next completed step (a rank killed mid-training, one spare waiting;
from the kill to every rank having completed a step that started after it), p50 and p95
over several kills; the per-step cost of the elastic wrapper against plain DDP
(examples/ddp_train.py) with no failure, in pairs of runs on the same hosts with the same
seed, the order alternating; the same failures for what users run today, plain DDP with a
checkpoint every K steps relaunched whole (bench.spares_restart); and, for both, the goodput
with one failure every 3 minutes and every 30 s (the lab job's restart costs seconds, a large
job's tens of minutes: the shorter period stands in for that ratio). torchft is not run.
"""

from __future__ import annotations

import os
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import typer

from clockfabric.bench import spares_restart, spares_zero
from clockfabric.bench.harness import (
    BENCHMARKS,
    Target,
    interval,
    labs_removed,
    machine,
    record,
    resampled_medians,
    targets_table,
)
from clockfabric.console import out, print_json, require_root
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build, job
from clockfabric.lab.state import Lab
from clockfabric.topology import multirail
from clockfabric.train import report
from clockfabric.train.launch import TrainJob

RANKS, SPARE = ["h0", "h1", "h2"], ["h3"]
EXAMPLES = Path("examples")


def plain_step_s(lab: Lab, folder: Path, args: list[str]) -> float:
    """Median per-step time (the slowest rank's) of plain DDP."""
    run = job.start(lab, RANKS, [str(EXAMPLES / "ddp_train.py"), *args], folder)
    try:
        result = run.wait(300, stall_s=60)
    finally:
        run.stop()
    if result.outcome != "completed" or result.median_step_s is None:
        raise ClockfabricError(f"plain DDP did not complete: {result.error or result.outcome}")
    return result.median_step_s


def elastic_run(lab: Lab, folder: Path, args: list[str],
                kill_at: int | None) -> tuple[list[dict[str, Any]], float | None]:
    """Run the elastic job (one spare if a rank is killed at step kill_at); its records and kill time."""
    run = TrainJob(lab, RANKS, SPARE if kill_at is not None else [], [str(EXAMPLES / "ddp_spares.py"), *args],
                   folder).start()
    killed = None
    try:
        deadline = time.monotonic() + 120
        while kill_at is not None and killed is None:
            done = report.steps_by_rank(report.records(folder))
            if len(done) == len(RANKS) and min(max(s) for s in done.values()) >= kill_at:
                killed = time.time()
                os.kill(run.ranks[1].proc.pid, signal.SIGKILL)
            elif time.monotonic() > deadline:
                raise ClockfabricError("the elastic job never reached the step to kill at")
            time.sleep(0.02)
        completed = run.wait(300)
    finally:
        run.stop()
    if not completed:
        raise ClockfabricError(f"the elastic job did not complete; see {folder}")
    return report.records(folder), killed


def step_s(recs: list[dict[str, Any]]) -> float:
    """Median per-step time, the slowest rank's per step."""
    slowest: dict[int, float] = {}
    for r in recs:
        if "duration_s" in r:
            slowest[r["step"]] = max(slowest.get(r["step"], 0.0), r["duration_s"])
    return statistics.median(slowest.values())


def goodputs(recoveries: list[float], restarts: list[dict[str, float]], step: float, ratio: float,
             every: int) -> dict[str, dict[str, float]]:
    """Goodput of ours and of checkpoint restarts, one failure every 180 s and every 30 s.

    A failure costs its median recovery less the step a failure-free job takes anyway; the
    restarts' overhead is their checkpoint writes, ours the wrapper's per-step ratio."""
    ours_lost = statistics.median(recoveries) - step
    restart_lost = statistics.median(r["recovery_s"] for r in restarts) - step
    writes = 1 + statistics.median(r["checkpoint_s"] for r in restarts) / (every * step)
    return {"ours": {str(p): spares_restart.goodput(ours_lost, p, max(ratio, 1.0)) for p in (180, 30)},
            "restart": {str(p): spares_restart.goodput(restart_lost, p, writes) for p in (180, 30)}}


@BENCHMARKS.register("spares", help="A killed rank replaced by a spare: failure -> next step; "
                                    "per-step cost against plain DDP")
def main(kills: int = typer.Option(5, min=1, help="Runs with a rank killed mid-training."),
         pairs: int = typer.Option(6, min=1, help="Paired no-failure runs, plain DDP and elastic."),
         steps: int = typer.Option(40, min=10, help="Training steps per run."),
         width: int = typer.Option(512, min=8, help="The MLP's hidden width."),
         every: int = typer.Option(10, min=1, help="Steps between the restart baseline's checkpoints."),
         as_json: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
    require_root()
    if not (EXAMPLES / "ddp_spares.py").is_file():
        raise ClockfabricError("run from the repository root: examples/ddp_spares.py is not here")
    args = ["--steps", str(steps), "--timeout", "30", "--width", str(width)]
    facts = machine()
    name = f"spares-bench-{os.getpid() % 10000}"
    recoveries: list[float] = []
    plain: list[float] = []
    ours: list[float] = []
    restarts: list[dict[str, float]] = []
    with labs_removed(name), tempfile.TemporaryDirectory(prefix="spares-bench-") as tmp:
        lab = build.up(multirail(4, 2, 2, 2, name="spares-bench"), name)
        for i in range(pairs):
            for which in (("plain", "ours") if i % 2 == 0 else ("ours", "plain")):
                folder = Path(tmp) / f"pair{i}-{which}"
                if which == "plain":
                    plain.append(plain_step_s(lab, folder, args))
                else:
                    ours.append(step_s(elastic_run(lab, folder, args, None)[0]))
            out.print(f"pair {i}: plain DDP {plain[-1] * 1e3:.1f} ms/step, elastic {ours[-1] * 1e3:.1f} ms/step")
        for i in range(kills):  # the kill lands at a different place between checkpoints each time
            restarts.append(spares_restart.restart_run(lab, RANKS, EXAMPLES / "ddp_train.py", args,
                                                       Path(tmp) / f"restart{i}", every=every,
                                                       kill_at=steps // 3 + i))
            out.print(f"restart {i}: next new step {restarts[-1]['recovery_s']:.2f} s after the kill, "
                      f"{restarts[-1]['steps_lost']:.0f} steps redone")
            recs, killed = elastic_run(lab, Path(tmp) / f"kill{i}", args, steps // 3 + i)
            took = report.recovery_s(recs, killed) if killed else None
            if took is None or report.job_steps(recs) != list(range(steps)):
                raise ClockfabricError(f"kill {i}: the job lost a step or never resumed")
            recoveries.append(took)
            out.print(f"kill {i}: next completed step {took:.2f} s after the kill")
        zero = spares_zero.measure(lab, Path(tmp), args, pairs)  # ZeRO-1's buddy copies, paired runs
    ratios = [o / p for o, p in zip(ours, plain, strict=True)]
    result = {"recovery_s": recoveries, "plain_step_s": plain, "elastic_step_s": ours, "step_ratio": ratios,
              "restart": restarts, "every": every, "steps": steps, "width": width, "ranks": len(RANKS)}
    gp = goodputs(recoveries, restarts, statistics.median(plain), statistics.median(ratios), every)
    result["goodput"] = gp
    targets = [
        Target("killed rank: failure -> next completed step, p95", float(np.percentile(recoveries, 95)), 5.0,
               unit="s", better="lower", baseline=float(np.percentile([r["recovery_s"] for r in restarts], 95)),
               note=f"p50 {statistics.median(recoveries):.2f} s over {kills} kills; baseline: restarts from a "
                    f"checkpoint every {every} steps, median "
                    f"{statistics.median(r['steps_lost'] for r in restarts):.0f} steps redone"),
        Target("per-step time with no failure, elastic / plain DDP", statistics.median(ratios), 1.02,
               unit="x", better="lower", baseline=1.0, note=f"median of {pairs} paired runs",
               interval=interval(resampled_medians({"ratio": ratios})["ratio"])),
        Target("goodput, one failure every 3 minutes (checkpoint restarts as baseline)", gp["ours"]["180"], 0.95,
               baseline=gp["restart"]["180"], note=f"every 30 s: {gp['ours']['30']:.3f}, restarts "
                                                   f"{gp['restart']['30']:.3f}; from the measured losses"),
    ]
    result["zero"] = zero.result()
    record("spares", [*targets, *zero.targets()], facts, result)
    if as_json:
        print_json(result)
        return
    out.print(targets_table("spares", targets))
