"""The Slurm prolog on a healthy node: end-to-end seconds of deploy/slurm/node-audit, bar 2 s.

A 3-host lab, its switches announcing themselves over LLDP every --lldp-interval seconds (30 s,
a switch's usual default), and the shipped node audit run as slurmd runs it: SLURMD_NODENAME set,
its settings in clockfabric.conf beside a slurm.conf, the hosts reached through their
namespaces. Each try runs, alternately, the prolog (which leaves cabling to the epilog and the
health check) and the baseline: by default the same audit with backend.cabling, whose hosts
wait up to timeouts.lldp_s (1.5 s) for their switch (what the health check runs); with
--baseline-tree, the prolog and sources of another checkout (an older commit). Both must pass
the node; the figure is the median and the worst of
--tries runs each, wall time, beside the CPU seconds they took (all descendants'): on a
machine others load, the wall time moves with the load and the CPU time does not.

    sudo clockfabric bench slurm-prolog [--tries 10] [--lldp-interval 30] [--baseline-tree DIR] [--out PATH]
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

import clockfabric
from clockfabric.bench import harness
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, labs_removed, record
from clockfabric.console import require_root
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build
from clockfabric.lab.lldp import speaker
from clockfabric.lab.naming import netns_prefix
from clockfabric.topology import multirail

DEFAULT_JSON = RESULTS / "slurm-prolog.json"
NODE_AUDIT = Path("deploy/slurm/node-audit")  # relative to the repository, as RESULTS is
LAB = "bench-prolog"
NODE = "h0"
BAR_S = 2.0
PROLOG, BASELINE = "prolog", "baseline"
out = Console(width=160)


@dataclass(frozen=True)
class Variant:
    """A node audit to time: its script, the role it runs as, and the clockfabric sources it runs."""
    script: Path
    role: str
    source: Path


def settings(lab, folder: Path, source: Path) -> dict[str, str]:
    """clockfabric.conf beside slurm.conf, and the environment slurmd gives a prolog."""
    folder.mkdir()
    cli = folder / "clockfabric"
    cli.write_text(f"#!/bin/sh\nPYTHONPATH={source} exec {sys.executable} -m clockfabric.cli \"$@\"\n")
    cli.chmod(0o755)
    via = (f"ip netns exec {netns_prefix(lab.name)}{{host}} env "
           f"PATH={Path(sys.executable).parent}:/usr/bin:/bin PYTHONPATH={source}")
    (folder / "clockfabric.conf").write_text(
        f"CLOCKFABRIC={cli}\nFLEET={lab.dir / 'topology.yaml'}\nAUDIT_ARGS=--via '{via}'\n"
        f"LOG={folder / 'node-audit.log'}\nSCONTROL=false\nTIMEOUT_S=30\n")
    return {**os.environ, "SLURM_CONF": str(folder / "slurm.conf"), "SLURMD_NODENAME": NODE, "SLURM_JOB_ID": "1"}


def cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)  # every waited-for descendant: the CLI, the hosts' reports
    return used.ru_utime + used.ru_stime


def one(variant: Variant, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one node audit that passes the node; anything else stops the benchmark."""
    t0, cpu0 = time.monotonic(), cpu_s()
    done = subprocess.run([str(variant.script), variant.role], env=env, capture_output=True, text=True, timeout=60)
    seconds, cpu = time.monotonic() - t0, cpu_s() - cpu0
    if done.returncode != 0 or ": passes" not in done.stderr or "NOT DRAINED" in done.stderr:
        raise ClockfabricError(f"{variant.script} {variant.role} did not pass the healthy node: {done.stderr.strip()}")
    return seconds, cpu


def measure(variants: dict[str, Variant], tries: int,
            lldp_interval_s: float) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(wall seconds, CPU seconds) of each run, by variant."""
    seconds: dict[str, list[float]] = {label: [] for label in variants}
    cpu: dict[str, list[float]] = {label: [] for label in variants}
    with labs_removed(LAB), tempfile.TemporaryDirectory(prefix="bench-prolog-") as tmp:
        build.down(LAB)
        lab = build.up(multirail(hosts=3, planes=1, leaves=1, spines=1), LAB)
        envs = {label: settings(lab, Path(tmp) / label, v.source) for label, v in variants.items()}
        switches = speaker(lab, lldp_interval_s)
        switches.start()
        try:
            for _ in range(tries):  # alternately, so both see the same load
                for label, variant in variants.items():
                    wall, used = one(variant, envs[label])
                    seconds[label].append(round(wall, 3))
                    cpu[label].append(round(used, 3))
        finally:
            switches.stop()
    return seconds, cpu


def variants(baseline_tree: Path | None) -> tuple[dict[str, Variant], str]:
    """The prolog and its baseline, and what the baseline is, in words."""
    ours = Variant(NODE_AUDIT, "prolog", Path(clockfabric.__file__).resolve().parents[1])
    if baseline_tree is None:
        return {PROLOG: ours, BASELINE: Variant(NODE_AUDIT, "health", ours.source)}, \
            "the same node audit with cabling (the health check's)"
    script, source = baseline_tree / NODE_AUDIT, baseline_tree / "src"
    if not script.exists() or not (source / "clockfabric").is_dir():
        raise ClockfabricError(f"--baseline-tree {baseline_tree}: no {NODE_AUDIT} and src/clockfabric there")
    return {PROLOG: ours, BASELINE: Variant(script, "prolog", source)}, f"the prolog of {baseline_tree}"


@BENCHMARKS.register("slurm-prolog")
def main(tries: Annotated[int, typer.Option(min=3, help="Runs of each.")] = 10,
         lldp_interval_s: Annotated[float, typer.Option("--lldp-interval", min=0.1,
                                                        help="Seconds between the switches' LLDP frames.")] = 30.0,
         baseline_tree: Annotated[Path | None, typer.Option(
             help="A checkout (e.g. `git worktree add`) whose prolog and sources are the baseline, "
                  "instead of this node audit with cabling.")] = None,
         json_path: Annotated[Path, typer.Option("--out", help="Where the record goes.")] = DEFAULT_JSON) -> None:
    """Seconds of deploy/slurm/node-audit prolog on a healthy lab node, against a baseline in the same run."""
    require_root()
    if not NODE_AUDIT.exists():
        raise ClockfabricError(f"run from the repository: {NODE_AUDIT} is not here")
    facts = harness.machine()
    runs, baseline = variants(baseline_tree)
    seconds, cpu = measure(runs, tries, lldp_interval_s)
    prolog, before = seconds[PROLOG], seconds[BASELINE]
    medians = harness.resampled_medians({"prolog": prolog})
    table = Table(title=f"node-audit on a healthy node, {tries} runs each, LLDP every {lldp_interval_s:g} s")
    for col in ("", "median s", "max s", "median CPU s", "runs"):
        table.add_column(col, justify="right")
    for label, xs in seconds.items():
        table.add_row(label, f"{statistics.median(xs):.2f}", f"{max(xs):.2f}", f"{statistics.median(cpu[label]):.2f}",
                      " ".join(f"{x:.2f}" for x in xs))
    out.print(table)
    judged = [Target("healthy prolog, median", round(statistics.median(prolog), 3), BAR_S, "s", better="lower",
                     baseline=round(statistics.median(before), 3), interval=harness.interval(medians["prolog"])),
              Target(f"healthy prolog, worst of {tries}", max(prolog), BAR_S, "s", better="lower",
                     baseline=max(before))]
    out.print(harness.targets_table("slurm-prolog", judged))
    figures = {"baseline": baseline, "p90 prolog s": round(float(np.percentile(prolog, 90)), 3),
               "median CPU s (prolog, baseline)": [statistics.median(cpu[label]) for label in (PROLOG, BASELINE)],
               "LLDP interval s": lldp_interval_s, "hosts audited": 3}
    record("slurm-prolog", judged, facts, {"seconds": seconds, "cpu_s": cpu, "lldp_interval_s": lldp_interval_s,
                                           "node": NODE, "baseline": baseline}, figures, path=json_path)
    out.print(f"raw: {json_path}")
