#!/usr/bin/env python3
"""Fleet audit: time on a 32-host lab, and false fails over repeated clean runs.

1. Time. A full audit (every check, the all-reduce sweep included) of a clean 32-host
   dual-plane lab (25 Mbit/s links), phase by phase. Baseline in the same run: the same gather with one host
   at a time (parallel=1), as a loop over ssh would do it; the ratio is what asking every
   host at once buys. Target: the whole audit under 60 s.
2. False fails. N consecutive full audits of one clean 8-host dual-plane lab: any fail,
   unknown or warn is counted, with the spread of what the checks measured (the latency
   floor, busbw over expected). Target: zero fails.

    sudo .venv/bin/python bench/audit.py [--hosts 32] [--repeat 10] [--json PATH]
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from clockfabric.audit import expect
from clockfabric.audit.gather import gather, lab_transport, specs
from clockfabric.audit.registry import select
from clockfabric.audit.run import audit
from clockfabric.lab import build
from clockfabric.topology import multirail

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "audit.json"
TIME_TARGET_S = 60.0
out = Console(width=160)
err = Console(stderr=True)


RATE = "25mbit"  # what two cores forward at full rate for 8 hosts (docs/audit.md, "Limits")


def _lab(name: str, hosts: int):
    build.down(name)
    return build.up(multirail(hosts=hosts, planes=2, leaves=max(2, hosts // 8), spines=2, host_rate=RATE), name)


def timing(hosts: int) -> dict:
    lab = _lab("bench-audit-t", hosts)
    try:
        cfg = expect.defaults()
        tell = specs(lab.topology, sorted(lab.topology.hosts), pings=cfg["latency"]["samples"],
                     lldp_wait_s=cfg["timeouts"]["lldp_s"])
        t0 = time.monotonic()
        _, missing_serial = gather(tell, lab_transport(lab), timeout_s=60, parallel=1)
        serial_s = time.monotonic() - t0
        report = audit(lab.topology, sorted(lab.topology.hosts), select([], []), transport=lab_transport(lab),
                       expect=cfg, fleet=lab.name, lab=lab,
                       progress=lambda stage, done, total: err.print(f"  {stage} {done}/{total}", end="\r"))
    finally:
        build.down(lab.name)
    checks_s = sum(c.seconds for c in report.results)
    return {"hosts": hosts, "total_s": round(report.seconds, 2), "gather_s": round(report.seconds - checks_s, 2),
            "gather_serial_s": round(serial_s, 2), "serial_missing": len(missing_serial),
            "checks_s": {c.id: round(c.seconds, 2) for c in report.results},
            "verdicts": {c.id: c.verdict.value for c in report.results}, "verdict": report.verdict.value,
            "speedup": round(serial_s / max(1e-9, report.seconds - checks_s), 1),
            "target_s": TIME_TARGET_S, "met": report.seconds < TIME_TARGET_S}


def repeats(n: int) -> dict:
    lab = _lab("bench-audit-r", 8)
    runs = []
    try:
        for i in range(n):
            r = audit(lab.topology, sorted(lab.topology.hosts), select([], []), transport=lab_transport(lab),
                      expect=expect.defaults(), fleet=lab.name, lab=lab)
            bad = [f"{c.id} {f.verdict.value} {f.where}: {f.message}" for c in r.results for f in c.findings
                   if f.verdict.value in ("fail", "unknown", "warn")]
            sweep = r.expectations.get("collective.sweep", [])
            runs.append({"seconds": round(r.seconds, 2), "verdict": r.verdict.value, "not_pass": bad,
                         "latency_limit_us": r.expectations.get("latency.max_us"),
                         "busbw_ratio_min": min((s["ratio"] for s in sweep if s["ratio"]), default=None),
                         "busbw_ratio_max": max((s["ratio"] for s in sweep if s["ratio"]), default=None)})
            err.print(f"  clean run {i + 1}/{n}: {r.verdict.value} in {r.seconds:.1f} s")
    finally:
        build.down(lab.name)
    ratios = [x for r in runs for x in (r["busbw_ratio_min"], r["busbw_ratio_max"]) if x]
    return {"runs": runs, "fails": sum(r["verdict"] in ("fail", "unknown") for r in runs),
            "warns": sum(r["verdict"] == "warn" for r in runs),
            "seconds_median": statistics.median(r["seconds"] for r in runs),
            "busbw_ratio_range": [min(ratios), max(ratios)] if ratios else None}


def main(hosts: int = typer.Option(32, help="Hosts in the timed lab."),
         repeat: int = typer.Option(10, help="Clean 8-host audits in a row."),
         json_path: Path = typer.Option(DEFAULT_JSON, "--json")) -> None:
    result = {"machine": {"cpus": __import__("os").cpu_count(), "kernel": platform.release()},
              "when": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    err.print(f"timing a full audit of a {hosts}-host lab")
    result["timing"] = t = timing(hosts)
    table = Table(title=f"audit of a clean {hosts}-host dual-plane lab")
    for col in ("phase", "seconds", "baseline (one host at a time)", "ratio"):
        table.add_column(col, justify="right")
    table.add_row("gather", f"{t['gather_s']:.1f}", f"{t['gather_serial_s']:.1f}", f"{t['speedup']:.1f}x")
    for cid, s in t["checks_s"].items():
        table.add_row(cid, f"{s:.2f}", "", "")
    table.add_row("total", f"{t['total_s']:.1f}", "", f"target < {TIME_TARGET_S:.0f} s: {'met' if t['met'] else 'MISSED'}")
    out.print(table)
    if repeat:
        err.print(f"{repeat} clean audits of an 8-host lab")
        result["repeats"] = r = repeats(repeat)
        out.print(f"{repeat} clean runs: {r['fails']} with a fail or unknown, {r['warns']} with a warning; "
                  f"median {r['seconds_median']:.1f} s; busbw/expected {r['busbw_ratio_range']}")
        for run in r["runs"]:
            for line in run["not_pass"]:
                out.print(f"  {line}")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(result, indent=1))
    err.print(f"wrote {json_path}")


if __name__ == "__main__":
    typer.run(main)
