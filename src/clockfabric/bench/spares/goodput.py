"""`clockfabric bench spares-goodput`: goodput measured over a long run with failures on a schedule.

`clockfabric bench spares` computes goodput from each failure's recovery; this measures it. On
one lab, with the same model, data and seed, each way of running the job trains a fixed number
of steps while rank 1's host fails every `--every` seconds of wall time (the first `--every`
seconds after the job's first step began, then every `--every` seconds after that, `--failures`
times):

1. ours: the elastic wrapper (examples/ddp_spares.py, train.launch.TrainJob) with one spare and
   re-admission: the failed host is drained, passes its audit and returns to the spare pool,
   so the one spare serves every failure; the failure goes to whichever host holds rank 1;
2. checkpoint restarts: plain DDP writing a checkpoint every K steps, relaunched whole after
   each failure (bench.spares.restart.restart_schedule);
3. torchft, where installed (bench.spares.torchft.torchft_schedule), the killed replica
   relaunched at once on a free host.

Definition. Failure-free plain DDP (examples/ddp_train.py) is run for 100 steps before the
first way and after each: its step time t is its wall time (the first step's start to the last
step's end) over its steps, and the median of those runs is the reference (the machine's speed
drifts between runs: the same run took 316 to 337 ms a step on this 2-core machine). A
failure-free plain run thus scores 1 by construction; the median of the slowest rank's step
durations would not (it leaves out the gaps between steps and is not the mean). Each way then
runs N steps, N sized from the first run so that a failure-free run takes about
(failures + 0.5) x every seconds. Goodput = N x t / the way's wall time, from its first step's
start to its last step's end: steps redone after a checkpoint, relaunches, recoveries and a
wrapper's per-step cost are all charged. torchft's steps after a loss train on fewer replicas
until the replacement has joined: a step's useful work is the share of the replicas that took
part in it (its records' `world` over the ranks), so N x t becomes t x the sum of the shares.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from clockfabric.audit import expect
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, labs_removed, machine, record, targets_table
from clockfabric.bench.spares import faults as spares_faults
from clockfabric.bench.spares import restart as spares_restart
from clockfabric.bench.spares import torchft as spares_torchft
from clockfabric.bench.spares.command import EXAMPLES, RANKS, SPARE, VICTIM
from clockfabric.bench.spares.faults import ISOLATED, KILLED, KINDS, MID_STEP
from clockfabric.console import out, print_json, require_root
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build, job
from clockfabric.lab.state import Lab
from clockfabric.lab.training import lab_host_audit, train_job
from clockfabric.topology import multirail
from clockfabric.train import report
from clockfabric.train.launch import TrainJob

BAR = 0.95
PROBE_STEPS = 100  # each plain-DDP run that gives the step time and a checkpoint's cost
PROBE_EVERY = 10  # its steps between checkpoints
METHODS = ("ours", "restarts", "torchft")


# ---- the arithmetic ----------------------------------------------------------------------------
def schedule(every_s: float, failures: int) -> list[float]:
    """When each failure lands, in seconds after the first step began."""
    return [every_s * (i + 1) for i in range(failures)]


def steps_for(step_s: float, every_s: float, failures: int) -> int:
    """Steps a failure-free run takes about (failures + 0.5) x every_s for: the last failure
    lands half a period before the end."""
    if step_s <= 0:
        raise ClockfabricError("the plain-DDP step time must be above 0")
    return max(PROBE_STEPS, round((failures + 0.5) * every_s / step_s))


def checkpoint_steps(checkpoint_s: float, every_s: float, step_s: float) -> int:
    """Steps between checkpoints at Young's interval, sqrt(2 x checkpoint cost x time between
    failures): the interval that loses least to checkpoint writes and redone steps together."""
    return max(1, round(math.sqrt(2 * checkpoint_s * every_s) / step_s))


def wall_per_step(recs: list[dict[str, Any]]) -> float:
    """A failure-free run's wall time (first step's start to last step's end) over its steps:
    what one step of it costs, the gaps between steps and the slow ones included. Checkpoint
    writes within it are taken out: the reference is plain DDP without them."""
    done = [r for r in recs if "duration_s" in r]
    if not done:
        raise ClockfabricError("the plain-DDP run completed no step")
    end = max(r["start"] + r["duration_s"] for r in done)
    saving = sum(r["checkpoint_s"] for r in recs if r.get("event") == "checkpoint" and r["time"] <= end)
    return (end - min(r["start"] for r in done) - saving) / len({r["step"] for r in done})


def goodput(recs: list[dict[str, Any]], steps: int, step_s: float, ranks: int,
            failures: list[float]) -> dict[str, Any]:
    """Goodput from a job's step records (every rank's, every attempt's): N x step_s of useful
    time, each step's share of the replicas where its records say how many took part (`world`),
    over the wall time from the first step's start to the last step's end. Beside it, the job's
    own step (the median time from one step's end to the next's, a step's last completion if
    redone): what its steps cost apart from the failures; and lost_s, the wall time beyond its
    steps at that pace: what the failures cost."""
    done = [r for r in recs if "duration_s" in r]
    if {r["step"] for r in done} != set(range(steps)):
        raise ClockfabricError(f"the job completed {len({r['step'] for r in done})} of its {steps} steps")
    first = min(r["start"] for r in done)
    wall = max(r["start"] + r["duration_s"] for r in done) - first
    worlds: dict[int, int] = {}
    ends: dict[int, float] = {}
    for r in done:
        worlds[r["step"]] = max(worlds.get(r["step"], 0), int(r.get("world", ranks)))
        ends[r["step"]] = max(ends.get(r["step"], 0.0), r["start"] + r["duration_s"])
    shares = [min(worlds[s], ranks) / ranks for s in range(steps)]
    useful = step_s * sum(shares)
    period = statistics.median(ends[s] - ends[s - 1] for s in range(1, steps)) if steps > 1 else wall
    return {"goodput": useful / wall, "wall_s": wall, "useful_s": useful, "steps": steps, "step_s": period,
            "lost_s": wall - steps * period, "short_steps": sum(1 for s in shares if s < 1),
            "failures_at_s": [round(f - first, 2) for f in failures]}


# ---- the three ways, each under the schedule ---------------------------------------------------
def ours_schedule(lab: Lab, folder: Path, args: list[str], at: list[float], kind: str, limit_s: float,
                  tell: Callable[[str], None]) -> tuple[list[dict[str, Any]], list[float]]:
    """The elastic job with one spare and re-admission, rank 1's host failed at each of `at`."""
    run = train_job(lab, RANKS, SPARE, [str(EXAMPLES / "ddp_spares.py"), *args], folder,
                   audit=lab_host_audit(lab, expect.defaults())).start()
    failures: list[float] = []
    victims: list[str] = []
    try:
        spares_faults.wait_for_step(lambda: report.records(folder), len(RANKS), 0)
        began = min(r["start"] for r in report.records(folder) if "duration_s" in r)
        for offset in at:
            while time.time() < began + offset and not run.finished():
                time.sleep(0.05)
            if run.finished():
                break
            with run.lock:
                victim = run.ranks[VICTIM]
            assert victim.proc is not None and victim.log is not None  # started by the job
            failures.append(spares_faults.inject(lab, kind, victim.host, victim.proc.pid, victim.log))
            victims.append(victim.host)
            tell(f"ours: {kind} rank {VICTIM} on {victim.host} at {failures[-1] - began:.1f} s")
            if kind == ISOLATED:  # mended once replaced, so that its audit can pass and it can return
                replaced(run, failures[-1])
                spares_faults.heal(lab, kind, victim.host)
        if not run.wait(max(1.0, began + limit_s - time.time())):
            raise ClockfabricError(f"the elastic job did not complete: {run.stopped or 'out of time'}; see {folder}")
    finally:
        run.stop()
        for host in victims:
            spares_faults.heal(lab, kind, host)
    return report.records(folder), failures


def replaced(run: TrainJob, since: float, timeout_s: float = 30) -> None:
    """Wait until the job chose a spare for a rank lost after `since`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with run.lock:
            if any(e["event"] == "spare chosen" and e["time"] >= since for e in run.events):
                return
        time.sleep(0.05)


def probe(lab: Lab, folder: Path, width: int) -> tuple[float, float]:
    """A failure-free plain-DDP run of PROBE_STEPS: its wall time per step, and a checkpoint's
    median cost (rank 0 writes one every PROBE_EVERY steps, as the restarts do)."""
    argv = [str(EXAMPLES / "ddp_train.py"), "--steps", str(PROBE_STEPS), "--timeout", "30", "--width", str(width),
            "--checkpoint", str(folder / "checkpoint.pt"), "--every", str(PROBE_EVERY)]
    run = job.start(lab, RANKS, argv, folder)
    try:
        result = run.wait(300, stall_s=60)
    finally:
        run.stop()
    if result.outcome != "completed":
        raise ClockfabricError(f"plain DDP did not complete: {result.error or result.outcome}")
    recs = [r for p in run.logs for r in job.read_log(p)]
    saves = [r["checkpoint_s"] for r in recs if r.get("event") == "checkpoint"]
    return wall_per_step(recs), statistics.median(saves) if saves else 0.0


Records = tuple[list[dict[str, Any]], list[float]]  # a way's step records, and when each failure began


def attempt(name: str, run: Callable[[], Records], kept: Path, folder: Path) -> Records | str:
    """One way under the schedule: its records, or why it failed (its logs kept), which is a row
    of the report, not the end of the benchmark."""
    try:
        return run()
    except ClockfabricError as e:
        copy = kept / folder.name
        if folder.exists():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(folder, copy, dirs_exist_ok=True)
        return f"{name}: {e} (logs kept in {copy})"


def scored(runs: dict[str, Records | str], steps: int, step_s: float) -> dict[str, dict[str, Any]]:
    """Each way's goodput against the plain-DDP step, or why it has none."""
    rows: dict[str, dict[str, Any]] = {}
    for name, got in runs.items():
        try:
            rows[name] = {"error": got} if isinstance(got, str) else goodput(got[0], steps, step_s, len(RANKS), got[1])
        except ClockfabricError as e:
            rows[name] = {"error": f"{name}: {e}"}
    return rows


# ---- the report --------------------------------------------------------------------------------
def said(row: dict[str, Any] | None) -> str:
    if row is None:
        return "not run"
    if "error" in row:
        return str(row["error"])
    return (f"{row['goodput']:.3f} ({row['wall_s']:.0f} s wall for {row['useful_s']:.0f} s of plain-DDP work, "
            f"{row['step_s'] * 1e3:.0f} ms a step, {row['lost_s']:.1f} s lost beyond that, "
            f"failures at {', '.join(f'{t:g}' for t in row['failures_at_s']) or 'none'} s)")


def period(every_s: float) -> str:
    return f"{every_s / 60:g} minutes" if every_s % 60 == 0 and every_s >= 120 else f"{every_s:g} s"


def targets(result: dict[str, Any]) -> list[Target]:
    methods = result["methods"]
    ours, restarts, theirs = (methods.get(m) for m in METHODS)
    value = ours.get("goodput") if ours else None
    base = restarts.get("goodput") if restarts else None
    torchft = said(theirs) if theirs else result["torchft_not_run"]
    if theirs and "goodput" in theirs:
        torchft += f"; a step's useful work its share of replicas, {theirs['short_steps']} steps short"
    plain = result["plain_steps_s"]
    note = (f"measured: {result['steps']} steps of plain DDP's {result['plain_step_s'] * 1e3:.1f} ms "
            f"(median of {len(plain)} failure-free runs, {min(plain) * 1e3:.0f}-{max(plain) * 1e3:.0f} ms), "
            f"{result['failures']} failures ({result['kind']}) every {result['every_s']:g} s; "
            f"ours {said(ours)}; checkpoint restarts (every {result['checkpoint_every']} steps) {said(restarts)}; "
            f"torchft {torchft}")
    return [Target(f"goodput, measured, one {result['kind']} rank every {period(result['every_s'])}", value, BAR,
                   baseline=base, note=note)]


@BENCHMARKS.register("spares-goodput")
def main(every: float = typer.Option(180.0, min=5, help="Seconds of wall time between failures."),
         failures: int = typer.Option(2, min=1, help="Failures per run."),
         kind: str = typer.Option(KILLED, help=f"Failure kind: one of {', '.join(KINDS)}."),
         torchft: bool = typer.Option(True, help="Run the torchft baseline (killed ranks only)."),
         width: int = typer.Option(512, min=8, help="The MLP's hidden width."),
         checkpoint_every: int = typer.Option(0, "--checkpoint-every", min=0,
                                              help="The restarts' steps between checkpoints; 0: Young's interval "
                                                   "from the probe's measured checkpoint time."),
         json_path: Path = typer.Option(RESULTS / "spares-goodput.json", "--out", help="Where the record goes."),
         as_json: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
    require_root()
    if not (EXAMPLES / "ddp_spares.py").is_file():
        raise ClockfabricError("run from the repository root: examples/ddp_spares.py is not here")
    if kind not in KINDS:
        raise ClockfabricError(f"--kind takes one of: {', '.join(KINDS)}")
    not_run = None if torchft else "not run: --no-torchft"
    if torchft and kind not in (KILLED, MID_STEP):
        not_run = f"not run: its harness relaunches a killed replica only, not a {kind} one"
    elif torchft and (why := spares_torchft.missing()):
        not_run = f"not run: {why}"
    facts = machine()
    name = f"goodput-bench-{os.getpid() % 10000}"
    kept = Path(tempfile.gettempdir()) / f"goodput-bench-failed-{os.getpid()}"
    methods = [m for m in METHODS if m != "torchft" or not not_run]
    with labs_removed(name), tempfile.TemporaryDirectory(prefix="goodput-bench-") as tmp:
        lab = build.up(multirail(4, 2, 2, 2, name="spares-goodput"), name)
        probes = [probe(lab, Path(tmp) / "probe0", width)]
        step, save_s = probes[0]
        steps = steps_for(step, every, failures)
        k = checkpoint_every or checkpoint_steps(save_s, every, step)
        out.print(f"plain DDP {step * 1e3:.1f} ms a step, a checkpoint {save_s * 1e3:.1f} ms: {steps} steps, "
                  f"a checkpoint every {k} steps, a {kind} failure every {every:g} s")
        args, at = ["--steps", str(steps), "--timeout", "30", "--width", str(width)], schedule(every, failures)
        limit = 3 * (failures + 0.5) * every + 300
        folders = {m: Path(tmp) / m for m in METHODS}
        ways: dict[str, Callable[[], Records]] = {
            "ours": lambda: ours_schedule(lab, folders["ours"], args, at, kind, limit, out.print),
            "restarts": lambda: spares_restart.restart_schedule(
                lab, RANKS, EXAMPLES / "ddp_train.py", args, folders["restarts"], every=k, at=at, kind=kind,
                spare=SPARE[0], limit_s=limit, tell=out.print),
            "torchft": lambda: spares_torchft.torchft_schedule(
                lab, RANKS, SPARE[0], EXAMPLES / "ddp_torchft.py", args, folders["torchft"], at=at,
                kind=kind, limit_s=limit, tell=out.print)}
        runs: dict[str, Records | str] = {}
        for method in methods:  # a plain-DDP run after each: the machine's speed drifts
            runs[method] = attempt(method, ways[method], kept, folders[method])
            probes.append(probe(lab, Path(tmp) / f"probe{len(probes)}", width))
            out.print(f"{method}: done; plain DDP {probes[-1][0] * 1e3:.1f} ms a step after it")
    reference = statistics.median(p[0] for p in probes)
    result: dict[str, Any] = {"every_s": every, "failures": failures, "kind": kind, "plain_step_s": reference,
                              "plain_steps_s": [p[0] for p in probes], "checkpoint_s": save_s,
                              "checkpoint_every": k, "steps": steps, "width": width, "ranks": len(RANKS),
                              "torchft_not_run": not_run, "methods": scored(runs, steps, reference)}
    found = targets(result)
    options = f"--every {every:g} --failures {failures} --kind {kind}" + ("" if torchft else " --no-torchft")
    record("spares-goodput", found, facts, result, path=json_path,
           figures={"options": options + ("" if every == 180 else " (the target's period is 180 s)")})
    if as_json:
        print_json(result)
        return
    for method, row in result["methods"].items():
        out.print(f"{method}: goodput {said(row)}")
    out.print(targets_table("spares-goodput", found))
