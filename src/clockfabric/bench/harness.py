"""What every benchmark shares: the registry, the machine it ran on, removing the labs it made,
judging a figure against its target, and the record it leaves in bench/results/NAME.json.

A benchmark is a module that registers its command (a function whose typer options are its
parameters) in BENCHMARKS, declared in bench/all.py with its help (its module is imported only
when it runs); `clockfabric bench NAME` runs it, and `clockfabric bench report` renders
docs/benchmarks.md from the records.

    @BENCHMARKS.register("clocksync-solve")
    def main(sizes: str = typer.Option("1000,3000", ...)) -> None: ...

    _declare("clocksync-solve", "clocksync.solve", "The network-effect solve: time and accuracy")  # bench/all.py
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from clockfabric.registry import Registry

BENCHMARKS: Registry = Registry("benchmark", load="clockfabric.bench.all")
RESULTS = Path("bench/results")  # records, relative to the repository a benchmark is run from
# each judged figure's interval: the central 90% of its value over its samples resampled with replacement
INTERVAL = 0.90
RESAMPLES = 4000
VERDICTS = ("met", "short", "out of reach")


# ---- the machine -------------------------------------------------------------------------------
def commit() -> str | None:
    """The checkout's commit (short), None outside a git checkout."""
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def cpu_ticks() -> tuple[int, int] | None:
    """(stolen, total) CPU ticks since boot. On a VM, steal is time the hypervisor gave another
    guest while this one had work: the transport moves bytes in Python, so steal slows it."""
    try:
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return ticks[7], sum(ticks[:8])  # user .. steal; guest time is already counted in user
    except (OSError, IndexError, ValueError):
        return None


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round((after[0] - before[0]) / (after[1] - before[1]), 3)


def loadavg() -> list[str]:
    try:
        return Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        return []


def machine() -> dict[str, Any]:
    """The facts a figure needs beside it: a shared, noisy machine's numbers mean little alone."""
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), "unknown")
    except OSError:
        cpu = "unknown"
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "kernel": platform.release(),
            "python": platform.python_version(), "commit": commit(), "date": now(), "loadavg_start": loadavg(),
            "cpu_ticks_start": cpu_ticks()}


def finish(facts: dict[str, Any]) -> dict[str, Any]:
    """The machine facts closed at the end of a run: the load then, and the CPU steal meanwhile."""
    return {**facts, "loadavg_end": loadavg(), "cpu_steal": steal_share(facts.get("cpu_ticks_start"), cpu_ticks())}


def describe(facts: dict[str, Any]) -> str:
    """One line: '2 cores AMD EPYC ..., kernel 6.18, Python 3.11.7'."""
    cores = f"{facts['cores']} cores " if facts.get("cores") else ""
    kernel = f", kernel {facts['kernel']}" if facts.get("kernel") else ""
    python = f", Python {facts['python']}" if facts.get("python") else ""
    return f"{cores}{facts.get('cpu', 'unknown')}{kernel}{python}"


# ---- labs --------------------------------------------------------------------------------------
def disk_bytes(folder: Path) -> int:
    """What the files under `folder` take, its logs aside: a store's footprint on disk."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and f.suffix != ".log")


@contextmanager
def labs_removed(*names: str) -> Iterator[None]:
    """Every lab named here is taken down on the way out, pass, fail or interrupt: a benchmark
    removes the labs it made, by name, and no others."""
    from clockfabric.lab import build

    try:
        yield
    finally:
        for name in names:
            build.down(name)


# ---- judging -----------------------------------------------------------------------------------
def resampled_medians(samples: dict[str, list[float]], resamples: int = RESAMPLES,
                      seed: int = 0) -> dict[str, np.ndarray]:
    """Per key, its median over each of `resamples` draws of its samples with replacement (the
    bootstrap): how far the median could move with other draws. Seeded, so a report's
    intervals can be recomputed from its JSON."""
    rng = np.random.default_rng(seed)
    out = {}
    for key, xs in samples.items():
        x = np.asarray(xs, dtype=float)
        out[key] = np.median(x[rng.integers(0, len(x), size=(resamples, len(x)))], axis=1)
    return out


def interval(values: np.ndarray, share: float = INTERVAL) -> list[float]:
    """The central `share` of a figure's resampled values: [low, high]."""
    tail = (1 - share) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return [round(float(low), 3), round(float(high), 3)]


@dataclass
class Target:
    """One figure against its bar. better: "higher" (a rate, a ratio) or "lower" (a time).
    possible: False where no implementation could have met it here (the baseline itself ran
    within the bar of what the hardware allows): out of reach, not short."""
    name: str
    value: float | None
    bar: float
    unit: str = ""
    better: str = "higher"
    baseline: float | None = None  # the same figure of the baseline, measured in the same run
    interval: list[float] | None = None
    possible: bool = True
    note: str = ""
    commit: str | None = None  # where one target was measured apart from the rest of its record
    date: str | None = None

    @property
    def met(self) -> bool:
        if self.value is None:
            return False
        return self.value >= self.bar if self.better == "higher" else self.value <= self.bar

    @property
    def verdict(self) -> str:
        return "met" if self.met else "short" if self.possible else "out of reach"

    @property
    def ratio(self) -> float | None:
        """The figure over the baseline's, oriented so that above 1 is better (None where either
        is missing, or a lower-is-better figure is 0: no finite ratio)."""
        if self.value is None or not self.baseline or (self.better == "lower" and not self.value):
            return None
        return round(self.value / self.baseline if self.better == "higher" else self.baseline / self.value, 3)


@dataclass
class Result:
    """What a benchmark leaves behind: bench/results/NAME.json, which docs/benchmarks.md is made
    from. source: "run" (written by `clockfabric bench NAME`) or "notebook" (transcribed from the
    lab notebook the page used to be; a run overwrites it)."""
    name: str
    targets: list[Target]
    figures: dict[str, Any] = field(default_factory=dict)  # the headline numbers beside the targets
    machine: dict[str, Any] = field(default_factory=dict)
    commit: str | None = None
    date: str | None = None
    source: str = "run"
    report: dict[str, Any] | None = None  # the benchmark's full output, rows and runs

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["targets"] = [{**asdict(t), "met": t.met, "verdict": t.verdict, "ratio": t.ratio}
                           for t in self.targets]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        fields = Target.__dataclass_fields__
        targets = [Target(**{k: v for k, v in t.items() if k in fields}) for t in data.get("targets", [])]
        return cls(**{**data, "targets": targets})

    def write(self, path: Path | None = None) -> Path:
        path = path or RESULTS / f"{self.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_dict(), indent=1, default=str) + "\n")
        return path


def record(name: str, targets: list[Target], facts: dict[str, Any], report: dict[str, Any],
           figures: dict[str, Any] | None = None, path: Path | None = None) -> Path:
    """Write a run's record (to bench/results/NAME.json, or `path`): its machine facts closed
    now, its commit and date from them."""
    facts = finish(facts)
    return Result(name, targets, figures or {}, facts, facts.get("commit"), facts.get("date"), "run",
                  report).write(path)


def load_results(directory: Path = RESULTS) -> list[Result]:
    return [Result.from_dict(json.loads(p.read_text())) for p in sorted(directory.glob("*.json"))]


# ---- tables ------------------------------------------------------------------------------------
def targets_table(title: str, targets: list[Target]) -> Table:
    """Each target: the figure, its bar, the baseline's and the ratio, and the verdict."""
    table = Table(title=title)
    for col in ("target", "figure", "bar", "baseline", "ratio", "verdict"):
        table.add_column(col, justify="left" if col == "target" else "right", no_wrap=col != "target")
    for t in targets:
        table.add_row(t.name, fmt(t.value, t.unit), f"{'>=' if t.better == 'higher' else '<='} {fmt(t.bar, t.unit)}",
                      fmt(t.baseline, t.unit), fmt(t.ratio, "x"),
                      t.verdict + ("" if t.interval is None else f" ({t.interval[0]:g}-{t.interval[1]:g})"))
    return table


def fmt(value: float | None, unit: str = "") -> str:
    """A figure as the tables print it: '-' when unknown, else 4 significant digits and its unit."""
    if value is None:
        return "-"
    text = f"{value:.4g}"
    return f"{text}{unit}" if unit in ("x", "%") else f"{text} {unit}".rstrip()
