"""`clockfabric bench spares`: a killed rank replaced by a spare, on one lab in one run.

Two figures: failure -> next completed step (a rank killed mid-training, one spare waiting;
from the kill to every rank having completed a step that started after it), p50 and p95
over several kills; and the per-step cost of the elastic wrapper against plain DDP
(examples/ddp_train.py) with no failure, in pairs of runs on the same hosts with the same
seed, the order alternating. The torchrun-with-restarts and torchft comparisons are not run
yet.
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


@BENCHMARKS.register("spares", help="A killed rank replaced by a spare: failure -> next step; "
                                    "per-step cost against plain DDP")
def main(kills: int = typer.Option(5, min=1, help="Runs with a rank killed mid-training."),
         pairs: int = typer.Option(6, min=1, help="Paired no-failure runs, plain DDP and elastic."),
         steps: int = typer.Option(40, min=10, help="Training steps per run."),
         width: int = typer.Option(512, min=8, help="The MLP's hidden width."),
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
        for i in range(kills):
            recs, killed = elastic_run(lab, Path(tmp) / f"kill{i}", args, steps // 3)
            took = report.recovery_s(recs, killed) if killed else None
            if took is None or report.job_steps(recs) != list(range(steps)):
                raise ClockfabricError(f"kill {i}: the job lost a step or never resumed")
            recoveries.append(took)
            out.print(f"kill {i}: next completed step {took:.2f} s after the kill")
    ratios = [o / p for o, p in zip(ours, plain, strict=True)]
    result = {"recovery_s": recoveries, "plain_step_s": plain, "elastic_step_s": ours, "step_ratio": ratios,
              "steps": steps, "width": width, "ranks": len(RANKS)}
    targets = [
        Target("killed rank: failure -> next completed step, p95", float(np.percentile(recoveries, 95)), 5.0,
               unit="s", better="lower", note=f"p50 {statistics.median(recoveries):.2f} s over {kills} kills"),
        Target("per-step time with no failure, elastic / plain DDP", statistics.median(ratios), 1.02,
               unit="x", better="lower", baseline=1.0, note=f"median of {pairs} paired runs",
               interval=interval(resampled_medians({"ratio": ratios})["ratio"])),
    ]
    record("spares", targets, facts, result)
    if as_json:
        print_json(result)
        return
    out.print(targets_table("spares", targets))
