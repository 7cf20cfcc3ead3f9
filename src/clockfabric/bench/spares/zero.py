"""`clockfabric bench spares-zero`: what ZeRO-1 in the elastic wrapper costs per step with no failure.

Paired runs on the same lab hosts with the same seed and data, the order rotating pair by
pair: ZeRO-1 inside the elastic wrapper, each rank's optimizer shard mirrored and stepped on
its buddy rank (`examples/ddp_spares.py --zero`); the same script with no wrapper (`--zero
--bare`); and plain DDP (`--bare`). Per run, the median over steps of the slowest rank's step
time; the figures are the ratios within each pair, their median and its bootstrap interval.
Each step record of ours also says how long the mirror's step took (`buddy_s`) and the memory
the mirror holds (`buddy_bytes`).
"""

from __future__ import annotations

import os
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from clockfabric.console import out, print_json, require_root
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build, job
from clockfabric.lab.state import Lab
from clockfabric.lab.training import train_job
from clockfabric.topology import multirail
from clockfabric.train import report

RANKS = ["h0", "h1", "h2"]
SCRIPT = Path("examples") / "ddp_spares.py"
KINDS = ("ours", "bare", "ddp")  # ZeRO-1 with buddies, ZeRO-1 with no wrapper, plain DDP


@dataclass
class Measured:
    step_s: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    buddy_share: list[float] = field(default_factory=list)  # per run of ours: the mirror's share of its steps
    buddy_bytes: int = 0

    def ratios(self, baseline: str) -> list[float]:
        return [o / b for o, b in zip(self.step_s["ours"], self.step_s[baseline], strict=True)]

    def result(self) -> dict[str, Any]:
        return {"step_s": self.step_s, "buddy_share": self.buddy_share, "buddy_bytes": self.buddy_bytes,
                "ratio_bare": self.ratios("bare"), "ratio_ddp": self.ratios("ddp")}

    def targets(self) -> list[Target]:
        pairs = len(self.step_s["ours"])
        bare, ddp = self.ratios("bare"), self.ratios("ddp")
        zero_vs_ddp = statistics.median(b / d for b, d in zip(self.step_s["bare"], self.step_s["ddp"], strict=True))
        share = f"the buddy's mirror step took {statistics.median(self.buddy_share):.1%} of the step time and " \
                f"holds {self.buddy_bytes / 1e3:.0f} kB per rank; no bytes sent per step"
        return [
            Target("ZeRO-1 per-step time in the wrapper / ZeRO-1 without it", statistics.median(bare),
                   1.02, unit="x", better="lower", baseline=1.0,
                   interval=interval(resampled_medians({"r": bare})["r"]),
                   note=f"median of {pairs} paired runs; {share}"),
            Target("ZeRO-1 per-step time in the wrapper / plain DDP", statistics.median(ddp), 1.02, unit="x",
                   better="lower", baseline=zero_vs_ddp, interval=interval(resampled_medians({"r": ddp})["r"]),
                   possible=zero_vs_ddp <= 1.02,
                   note=f"median of {pairs} paired runs; baseline: ZeRO-1 without the wrapper / plain DDP"),
        ]


def _bare_step_s(lab: Lab, folder: Path, args: list[str]) -> float:
    run = job.start(lab, RANKS, [str(SCRIPT), *args, "--bare"], folder)
    try:
        result = run.wait(300, stall_s=60)
    finally:
        run.stop()
    if result.outcome != "completed" or result.median_step_s is None:
        raise ClockfabricError(f"{' '.join(args)} --bare did not complete: {result.error or result.outcome}")
    return result.median_step_s


def _ours(lab: Lab, folder: Path, args: list[str]) -> tuple[float, float, int]:
    """Ours with no failure: (median step, the mirror's share of the step time, its bytes)."""
    run = train_job(lab, RANKS, [], [str(SCRIPT), *args], folder).start()
    try:
        completed = run.wait(300)
    finally:
        run.stop()
    if not completed:
        raise ClockfabricError(f"ZeRO-1 in the elastic wrapper did not complete; see {folder}")
    steps = [r for r in report.records(folder) if "duration_s" in r]
    slowest: dict[int, float] = {}
    for r in steps:
        slowest[r["step"]] = max(slowest.get(r["step"], 0.0), r["duration_s"])
    share = sum(r["buddy_s"] for r in steps) / sum(r["duration_s"] for r in steps)
    return statistics.median(slowest.values()), share, int(steps[-1]["buddy_bytes"])


def measure(lab: Lab, folder: Path, args: list[str], pairs: int) -> Measured:
    """`pairs` rounds of the three runs on lab's hosts h0-h2, args the script's common arguments."""
    got = Measured()
    zero = [*args, "--zero"]
    for i in range(pairs):
        for kind in KINDS[i % 3:] + KINDS[:i % 3]:  # each kind first, second and third in turn
            where = folder / f"zero{i}-{kind}"
            if kind == "ours":
                step, share, got.buddy_bytes = _ours(lab, where, zero)
                got.buddy_share.append(share)
            else:
                step = _bare_step_s(lab, where, zero if kind == "bare" else args)
            got.step_s[kind].append(step)
        out.print(f"ZeRO-1 pair {i}: " + ", ".join(f"{k} {got.step_s[k][-1] * 1e3:.1f} ms/step" for k in KINDS))
    return got


@BENCHMARKS.register("spares-zero")
def main(pairs: int = typer.Option(6, min=1, help="Rounds of the three runs, the order rotating."),
         steps: int = typer.Option(40, min=10, help="Training steps per run."),
         width: int = typer.Option(512, min=8, help="The MLP's hidden width."),
         json_path: Path = typer.Option(RESULTS / "spares-zero.json", "--out", help="Where the record goes."),
         as_json: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
    require_root()
    if not SCRIPT.is_file():
        raise ClockfabricError(f"run from the repository root: {SCRIPT} is not here")
    args = ["--steps", str(steps), "--timeout", "30", "--width", str(width)]
    facts = machine()
    name = f"spares-zero-{os.getpid() % 10000}"
    with labs_removed(name), tempfile.TemporaryDirectory(prefix="spares-zero-") as tmp:
        lab = build.up(multirail(3, 2, 2, 2, name="spares-zero"), name)
        got = measure(lab, Path(tmp), args, pairs)
    result = {**got.result(), "steps": steps, "width": width, "ranks": len(RANKS)}
    targets = got.targets()
    record("spares-zero", targets, facts, result, path=json_path)
    if as_json:
        print_json(result)
        return
    out.print(targets_table("ZeRO-1 in the elastic wrapper", targets))
