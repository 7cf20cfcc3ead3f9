"""Fleet monitoring: what an agent costs its host. Targets: <= 1% of a core and <= 80 MB RSS at
10 peers on an idle fabric, <= 2% with clock sync's load.

Lab: leafspine(12, 2, 2), the fleet as `clockfabric monitor --keep` starts it (controller on h0,
a switch agent per switch, a pushing clock agent with 10 peers on every host: probes, fits,
telemetry, LLDP, path map, /metrics, pushes). Each setting runs the whole fleet afresh; after
the agents push and a settling time, every host agent's CPU (utime + stime from
/proc/<pid>/stat) and RSS are read over the measuring time. Settings run in turns, `--repeats`
rounds, so the machine's drift falls on all alike. The reference host (h0) also runs the clock
solver and is reported apart.

The baseline, in the same run: the agent probing at its full rate all the time
(`--quiet-rate` equal to `--probe-rate`, 20 exchanges a second), i.e. the agent before it learnt
to slow down on a settled clock and a quiet fabric.

Then the same fabric with traffic classes (`classes:`, every default), where the agent also runs
the class stream (probes in the collective class at half the full rate, for root cause): its
default setting, judged against the same target and baseline.

    sudo clockfabric bench agent-overhead [--repeats 2] [--settle 30] [--measure 30] [--out PATH]
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from clockfabric.bench import harness
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, labs_removed, record
from clockfabric.console import require_root
from clockfabric.lab import build
from clockfabric.lab.agents import LabAgents
from clockfabric.lab.monitoring import LabFleet
from clockfabric.lab.state import Lab
from clockfabric.topology import TrafficClasses, leafspine

LAB = "bench-aover"
CPU_TARGET_PCT, RSS_TARGET_MB = 1.0, 80.0  # per agent, idle fabric, 10 peers
CLASSES = "default, fabric with traffic classes"
SETTINGS = {  # name -> (extra agent arguments, the fabric has traffic classes)
    "full rate (baseline)": (["--quiet-rate", "20"], False),
    "default": ([], False),
    CLASSES: ([], True),
}
TICK_S = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
DEFAULT_JSON = RESULTS / "agent-overhead.json"

out = Console(width=max(132, Console().width))  # the table is wide: do not squeeze it into 80 columns


def cpu_and_rss(pid: int) -> tuple[float, float, float]:
    """(user s, system s, RSS MB) of one process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20
    return int(fields[11]) / TICK_S, int(fields[12]) / TICK_S, rss


def measure(lab: Lab, extra: list[str], settle_s: float, measure_s: float) -> dict:
    fleet = LabFleet(lab)
    fleet.agents = LabAgents(lab, peers=10, extra=["--controller", fleet.url, *extra],
                             per_host=lambda h: ["--token-file", str(fleet.node_token_file(h))])
    fleet.start()
    try:
        fleet.wait_pushing()
        time.sleep(settle_s)
        pids = {h: p.pid for h, p in zip(fleet.agents.hosts, fleet.agents.procs, strict=True)}
        before = {h: cpu_and_rss(pid) for h, pid in pids.items()}
        t0 = time.monotonic()
        time.sleep(measure_s)
        after = {h: cpu_and_rss(pid) for h, pid in pids.items()}
        wall = time.monotonic() - t0
        states = {h: json.loads((fleet.agents.state_dir / f"{h}.json").read_text()) for h in pids}
    finally:
        fleet.stop()
    rows = {}
    for h in pids:
        user = (after[h][0] - before[h][0]) / wall * 100
        system = (after[h][1] - before[h][1]) / wall * 100
        rows[h] = {"user_pct": user, "system_pct": system, "cpu_pct": user + system, "rss_mb": after[h][2],
                   "probe_interval_s": states[h].get("probe_interval_s"), "probe_quiet": states[h].get("probe_quiet")}
    return rows


@BENCHMARKS.register("agent-overhead")
def main(repeats: Annotated[int, typer.Option(min=1)] = 2, settle: Annotated[float, typer.Option()] = 30.0,
         measure_s: Annotated[float, typer.Option("--measure")] = 30.0,
         json_path: Annotated[Path, typer.Option("--out", help="Where the record goes.")] = DEFAULT_JSON) -> None:
    """Fleet monitoring: what an agent costs its host (CPU, RSS), against the agent probing at full rate."""
    require_root()
    facts = harness.machine()
    runs: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    for classes in (False, True):  # a lab each; on each, its settings in turns
        with labs_removed(LAB):
            fabric = leafspine(12, 2, 2)
            lab = build.up(replace(fabric, classes=TrafficClasses()) if classes else fabric, LAB)
            for r in range(repeats):
                for name, (extra, with_classes) in SETTINGS.items():
                    if with_classes == classes:
                        out.print(f"round {r + 1}/{repeats}: {name}")
                        runs[name].append(measure(lab, extra, settle, measure_s))
    table = Table(title="agent cost, 12-host lab, 10 peers, idle (per agent; reference h0 apart)")
    for col in ("setting", "CPU % (mean)", "user %", "system %", "max host %", "RSS MB", "h0 CPU %", "h0 RSS MB",
                "quiet", "vs baseline"):
        table.add_column(col, justify="right")
    summary = {}
    for name, rs in runs.items():
        others = [row for rows in rs for h, row in rows.items() if h != "h0"]
        ref = [rows["h0"] for rows in rs]
        summary[name] = {k: float(np.mean([o[k] for o in others])) for k in ("cpu_pct", "user_pct", "system_pct",
                                                                            "rss_mb")}
        summary[name]["max_cpu_pct"] = max(o["cpu_pct"] for o in others)
        summary[name]["ref_cpu_pct"] = float(np.mean([o["cpu_pct"] for o in ref]))
        summary[name]["ref_rss_mb"] = float(np.mean([o["rss_mb"] for o in ref]))
        # the share of hosts probing at the quiet rate (a settled clock): a loaded machine keeps them at full rate
        summary[name]["quiet_share"] = float(np.mean([bool(o["probe_quiet"]) for o in others]))
    base = summary["full rate (baseline)"]["cpu_pct"]
    for name, s in summary.items():
        table.add_row(name, f"{s['cpu_pct']:.2f}", f"{s['user_pct']:.2f}", f"{s['system_pct']:.2f}",
                      f"{s['max_cpu_pct']:.2f}", f"{s['rss_mb']:.0f}", f"{s['ref_cpu_pct']:.2f}",
                      f"{s['ref_rss_mb']:.0f}", f"{s['quiet_share']:.0%}", f"{s['cpu_pct'] / base:.2f}x")
    out.print(table)
    ours = summary["default"]
    judged = [Target("agent CPU, idle, 10 peers", ours["cpu_pct"], CPU_TARGET_PCT, "% of a core", better="lower",
                     baseline=base),
              Target("agent CPU, idle, 10 peers, fabric with traffic classes (class stream on)",
                     summary[CLASSES]["cpu_pct"], CPU_TARGET_PCT, "% of a core", better="lower", baseline=base),
              Target("agent RSS", ours["rss_mb"], RSS_TARGET_MB, "MB", better="lower")]
    record("agent-overhead", judged, facts, {"settle_s": settle, "measure_s": measure_s, "summary": summary,
                                             "runs": runs}, path=json_path)
    out.print(f"raw: {json_path}")
