"""`clockfabric bench spares`: the same job three ways on one lab in one run, under the same failures.

(1) what users run today: plain DDP writing a checkpoint every K steps, relaunched whole once a
worker exits (bench.spares.restart: after a frozen or cut-off rank, at the collective timeout);
(2) torchft on gloo (bench.spares.torchft); (3) ours: the elastic wrapper with a spare waiting
(examples/ddp_spares.py, train.launch). The failures (bench.spares.faults): a rank killed
between steps or in the middle of its step (its peers in the all-reduce), its host isolated
(both NICs down), its process frozen (SIGSTOP); each of the three ways under each of them.

Figures: failure -> next completed step (every rank having completed a step that started
after the failure), p50 and p95 per failure kind, with the completed steps lost and the world
size after; the per-step cost of the elastic wrapper against plain DDP with no failure, in
pairs of runs on the same hosts with the same seed, the order alternating; and the goodput of
the three with one failure every 3 minutes and every 30 s (the lab job's restart costs
seconds, a large job's tens of minutes: the shorter period stands in for that ratio).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import typer

from clockfabric.bench.harness import (
    BENCHMARKS,
    RESULTS,
    Target,
    interval,
    labs_removed,
    machine,
    record,
    resampled_medians,
    targets_table,
)
from clockfabric.bench.spares import faults as spares_faults
from clockfabric.bench.spares import restart as spares_restart
from clockfabric.bench.spares import torchft as spares_torchft
from clockfabric.bench.spares.faults import FROZEN, ISOLATED, KILLED, KINDS, MID_STEP
from clockfabric.console import out, print_json, require_root
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build, job
from clockfabric.lab.state import Lab
from clockfabric.lab.training import train_job
from clockfabric.topology import multirail
from clockfabric.train import report

RANKS, SPARE = ["h0", "h1", "h2"], ["h3"]
VICTIM = 1  # the rank failed in every run
EXAMPLES = Path("examples")
BARS = {KILLED: 5.0, MID_STEP: 5.0, ISOLATED: 5.0, FROZEN: 10.0}


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


def elastic_run(lab: Lab, folder: Path, args: list[str], kind: str | None = None,
                fail_at: int = 0) -> tuple[list[dict[str, Any]], float | None]:
    """Run the elastic job; with a failure kind, one spare and that failure once every rank
    completed fail_at. Its records and when the failure began."""
    run = train_job(lab, RANKS, SPARE if kind else [], [str(EXAMPLES / "ddp_spares.py"), *args], folder).start()
    failed = None
    try:
        if kind:
            spares_faults.wait_for_step(lambda: report.records(folder), len(RANKS), fail_at)
            victim = run.ranks[VICTIM]
            assert victim.proc is not None and victim.log is not None  # started by the job
            failed = spares_faults.inject(lab, kind, victim.host, victim.proc.pid, victim.log)
        completed = run.wait(180)
    finally:
        run.stop()
        if kind:
            spares_faults.heal(lab, kind, RANKS[VICTIM])
    if not completed:
        raise ClockfabricError(f"the elastic job did not complete; see {folder}")
    return report.records(folder), failed


def step_s(recs: list[dict[str, Any]]) -> float:
    """Median per-step time, the slowest rank's per step."""
    slowest: dict[int, float] = {}
    for r in recs:
        if "duration_s" in r:
            slowest[r["step"]] = max(slowest.get(r["step"], 0.0), r["duration_s"])
    return statistics.median(slowest.values())


def ours_run(lab: Lab, folder: Path, args: list[str], kind: str, fail_at: int, steps: int) -> dict[str, float]:
    recs, failed = elastic_run(lab, folder, args, kind, fail_at)
    assert failed is not None
    return ours_figures(recs, failed, steps)


def failed_run(folder: Path, kept: Path, run: Callable[..., dict[str, Any]], *args: Any,
               **kwargs: Any) -> dict[str, Any]:
    """run(*args, **kwargs): one failure's figures, writing its logs in folder. A run that fails
    is a row saying why (its logs kept under kept), not the end of the benchmark: the failure
    counts against the target."""
    try:
        return run(*args, **kwargs)
    except ClockfabricError as e:
        copy = kept / folder.parent.name / folder.name
        shutil.copytree(folder, copy, dirs_exist_ok=True)
        return {"error": f"{e} (logs kept in {copy})"}


def ours_figures(recs: list[dict[str, Any]], failed: float, steps: int) -> dict[str, float]:
    """Recovery, completed steps lost (none, or the run is rejected) and the world size after."""
    took = report.recovery_s(recs, failed)
    if took is None or report.job_steps(recs) != list(range(steps)):
        raise ClockfabricError("the elastic job lost a step or never resumed")
    after = [r for r in recs if r.get("event") == "joined" and r["time"] > failed]
    return {"recovery_s": took, "steps_lost": 0.0, "world_after": float(len({r["rank"] for r in after}))}


def goodputs(ours: list[float], restarts: list[dict[str, float]], torchft: list[dict[str, float]], step: float,
             ratio: float, every: int) -> dict[str, dict[str, float]]:
    """Goodput of the three with one killed rank every 180 s and every 30 s.

    A failure costs its median recovery less the step a failure-free job takes anyway; the
    restarts' per-step overhead is their checkpoint writes, ours the wrapper's ratio, torchft's
    its step time against plain DDP's. torchft also runs a rank short until the replacement
    has joined: that time costs a 1/world share of it (the whole rest of the period when no
    replacement joined in the run)."""
    periods = (180, 30)
    gp = {"ours": {str(p): spares_restart.goodput(statistics.median(ours) - step, p, max(ratio, 1.0))
                   for p in periods}}
    restart_lost = statistics.median(r["recovery_s"] for r in restarts) - step
    writes = 1 + statistics.median(r["checkpoint_s"] for r in restarts) / (every * step)
    gp["restart"] = {str(p): spares_restart.goodput(restart_lost, p, writes) for p in periods}
    if torchft:
        recovery = statistics.median(r["recovery_s"] for r in torchft)
        short = statistics.median(r["rejoined_s"] - r["recovery_s"] if r["rejoined_s"] >= 0 else float("inf")
                                  for r in torchft)
        slower = max(1.0, statistics.median(r["step_s"] for r in torchft) / step)
        gp["torchft"] = {str(p): spares_restart.goodput(recovery - step + min(short, p) / len(RANKS), p, slower)
                         for p in periods}
    return gp


def p95(values: list[float]) -> float:
    return float(np.percentile(values, 95))


def said(row: dict[str, Any]) -> str:
    """One run's line: its figures, or why it failed."""
    if "error" in row:
        return str(row["error"])
    return (f"next completed step {row['recovery_s']:.2f} s after, world {row['world_after']:.0f}, "
            f"{row['steps_lost']:.0f} steps lost")


def completed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if "error" not in r]


def summary(rows: list[dict[str, Any]]) -> str:
    done, failed = completed(rows), [r["error"] for r in rows if "error" in r]
    said = f"{len(failed)} of {len(rows)} runs failed ({failed[0]})" if failed else ""
    if not done:
        return said
    recover = [r["recovery_s"] for r in done]
    return (f"p50 {statistics.median(recover):.2f} s, p95 {p95(recover):.2f} s over {len(done)}, "
            f"{statistics.median(r['steps_lost'] for r in done):.0f} steps lost, "
            f"world {min(r['world_after'] for r in done):.0f} after" + (f"; {said}" if said else ""))


def kind_targets(result: dict[str, Any]) -> list[Target]:
    """Failure -> next completed step, per kind: ours, with torchft's p95 as its baseline."""
    targets = []
    for kind in KINDS:
        ours = result["ours"].get(kind)
        if not ours:
            continue
        theirs = result["torchft"].get(kind) or []
        baseline = p95([r["recovery_s"] for r in completed(theirs)]) if completed(theirs) else None
        note = f"ours: {summary(ours)}; " + (f"torchft: {summary(theirs)}" if theirs
                                              else f"torchft: {result['torchft_not_run'] or 'not run for this kind'}")
        if result["restart"].get(kind):
            note += f"; checkpoint restarts: {summary(result['restart'][kind])}"
        whole = len(completed(ours)) == len(ours)  # a failed run fails the target: no figure
        targets.append(Target(f"{kind} rank: failure -> next completed step, p95",
                              p95([r["recovery_s"] for r in ours]) if whole else None, BARS[kind], unit="s",
                              better="lower", baseline=baseline, note=note))
    return targets


@BENCHMARKS.register("spares")
def main(runs: int = typer.Option(3, min=1, help="Runs per failure kind (ours and torchft)."),
         restarts: int = typer.Option(3, min=1, help="Checkpoint-restart runs per failure kind."),
         pairs: int = typer.Option(4, min=1, help="Paired no-failure runs, plain DDP and elastic."),
         steps: int = typer.Option(40, min=10, help="Training steps per run."),
         width: int = typer.Option(512, min=8, help="The MLP's hidden width."),
         every: int = typer.Option(10, min=1, help="Steps between the restart baseline's checkpoints."),
         kinds: str = typer.Option(",".join(KINDS), help="Failure kinds, comma-separated."),
         torchft: bool = typer.Option(True, help="Run the torchft baseline."),
         json_path: Path = typer.Option(RESULTS / "spares.json", "--out", help="Where the record goes."),
         as_json: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
    require_root()
    if not (EXAMPLES / "ddp_spares.py").is_file():
        raise ClockfabricError("run from the repository root: examples/ddp_spares.py is not here")
    chosen = [k.strip() for k in kinds.split(",") if k.strip()]
    if not chosen or set(chosen) - set(KINDS):
        raise ClockfabricError(f"--kinds takes some of: {', '.join(KINDS)}")
    args = ["--steps", str(steps), "--timeout", "30", "--width", str(width)]
    not_run = None if torchft else "not run: --no-torchft"
    if torchft and (why := spares_torchft.missing()):
        not_run = f"not run: {why}"
    facts = machine()
    name = f"spares-bench-{os.getpid() % 10000}"
    result: dict[str, Any] = {"plain_step_s": [], "elastic_step_s": [], "ours": {}, "torchft": {}, "restart": {},
                              "torchft_not_run": not_run, "every": every, "steps": steps, "width": width,
                              "ranks": len(RANKS)}
    kept = Path(tempfile.gettempdir()) / f"spares-bench-failed-{os.getpid()}"  # logs of runs that failed
    with labs_removed(name), tempfile.TemporaryDirectory(prefix="spares-bench-") as tmp:
        lab = build.up(multirail(4, 2, 2, 2, name="spares-bench"), name)
        for i in range(pairs):
            for which in (("plain", "ours") if i % 2 == 0 else ("ours", "plain")):
                folder = Path(tmp) / f"pair{i}-{which}"
                if which == "plain":
                    result["plain_step_s"].append(plain_step_s(lab, folder, args))
                else:
                    result["elastic_step_s"].append(step_s(elastic_run(lab, folder, args)[0]))
            out.print(f"pair {i}: plain DDP {result['plain_step_s'][-1] * 1e3:.1f} ms/step, "
                      f"elastic {result['elastic_step_s'][-1] * 1e3:.1f} ms/step")
        for kind in chosen:
            for i in range(restarts):  # the failure lands at a different place between checkpoints each time
                folder = Path(tmp) / f"restart-{kind.replace(' ', '-')}{i}"
                row = failed_run(folder, kept, spares_restart.restart_run, lab, RANKS, EXAMPLES / "ddp_train.py",
                                 args, folder, every=every, kill_at=steps // 3 + i, kind=kind, spare=SPARE[0])
                row = row if "error" in row else row | {"world_after": float(len(RANKS))}
                result["restart"].setdefault(kind, []).append(row)
                out.print(f"checkpoint restarts, {kind} {i}: {said(row)}"
                          + (f", {row['exit_s']:.1f} s until a worker exited" if "exit_s" in row else ""))
            for i in range(runs):
                folder = Path(tmp) / f"{kind.replace(' ', '-')}{i}"
                row = failed_run(folder / "ours", kept, ours_run, lab, folder / "ours", args, kind,
                                 steps // 3 + i, steps)
                result["ours"].setdefault(kind, []).append(row)
                out.print(f"ours, {kind} {i}: {said(row)}")
                if not_run:
                    continue
                row = failed_run(folder / "torchft", kept, spares_torchft.torchft_run, lab, RANKS, SPARE[0],
                                 EXAMPLES / "ddp_torchft.py", args, folder / "torchft", kind=kind,
                                 fail_at=steps // 3 + i)
                result["torchft"].setdefault(kind, []).append(row)
                out.print(f"torchft, {kind} {i}: {said(row)}")
    plain, ratios = result["plain_step_s"], [o / p for o, p in zip(result["elastic_step_s"],
                                                                   result["plain_step_s"], strict=True)]
    result["step_ratio"] = ratios
    killed = completed([r for kind in (KILLED, MID_STEP) for r in result["ours"].get(kind, [])])
    theirs = completed([r for kind in (KILLED, MID_STEP) for r in result["torchft"].get(kind, [])])
    targets = kind_targets(result)
    targets.append(Target("per-step time with no failure, elastic / plain DDP", statistics.median(ratios), 1.02,
                          unit="x", better="lower", baseline=1.0, note=f"median of {pairs} paired runs",
                          interval=interval(resampled_medians({"ratio": ratios})["ratio"])))
    restarted = completed(result["restart"].get(KILLED, []))
    if killed and restarted:
        gp = result["goodput"] = goodputs([r["recovery_s"] for r in killed], restarted, theirs,
                                          statistics.median(plain), statistics.median(ratios), every)
        others = f"torchft {gp['torchft']['180']:.3f}" if "torchft" in gp else f"torchft {not_run}"
        targets.append(Target(
            "goodput, one killed rank every 3 minutes (checkpoint restarts as baseline)", gp["ours"]["180"], 0.95,
            baseline=gp["restart"]["180"],
            note=f"{others}; every 30 s: ours {gp['ours']['30']:.3f}, restarts {gp['restart']['30']:.3f}"
                 + (f", torchft {gp['torchft']['30']:.3f}" if "torchft" in gp else "")
                 + "; from the measured losses"))
    record("spares", targets, facts, result, path=json_path)
    if as_json:
        print_json(result)
        return
    out.print(targets_table("spares", targets))
