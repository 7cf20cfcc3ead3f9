"""`clockfabric bench contention`'s run: the plan, checked once; build the lab, run every scenario
with the hosts' agents up, take the lab down; and a saved report judged again."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, replace

from clockfabric.bench.contention.model import (
    ALLTOALL_ALGORITHM,
    ELEPHANT_CONGESTION,
    FABRIC_RATE,
    HOST_RATE,
    Plan,
    Run,
    spine_paths,
    topology,
)
from clockfabric.bench.contention.scenarios import run_scenario
from clockfabric.bench.contention.summary import judge, median_steal, summarize
from clockfabric.bench.harness import labs_removed
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build
from clockfabric.lab.agents import LabAgents


def run(plan: Plan, *, lab_name: str = "contention", progress: Callable[[str], None] = lambda _: None) -> dict:
    """Bring the lab up, run every scenario, take it down; the report (JSON-ready)."""
    topo = topology(plan.fabric, plan.spines, plan.mtu)
    plan = replace(plan, subflows=plan.subflows or spine_paths(topo))
    started = time.monotonic()
    with labs_removed(lab_name):
        lab = build.up(topo, lab_name)
        agents = LabAgents(lab, extra=["--no-failover", "--no-steer", "--metrics-port", "0"])
        try:
            progress("starting the hosts' agents")  # the ranks ask theirs where to place subflows and share spines
            agents.start()
            agents.wait_publishing()
            runs = [r for sc in plan.scenarios for r in run_scenario(lab, sc, plan, progress)]
        finally:
            agents.stop()
    summary = summarize(topo, runs, plan.size)
    return {"lab": {"fabric": plan.fabric, "hosts": 8, "leaves": 2, "spines": plan.spines,
                    "planes": 2 if plan.fabric == "dualplane" else 1, "host_rate": HOST_RATE,
                    "fabric_rate": FABRIC_RATE, "mtu": plan.mtu, "buffer_pkts": topo.default_buffer_pkts},
            "size_bytes": plan.size, "warmup": plan.warmup, "iters": plan.iters, "subflows": plan.subflows,
            "seeds": plan.seeds, "rcvbuf_bytes": plan.rcvbuf, "rcvbuf_budget_bytes": plan.rcvbuf_budget,
            "standby": plan.standby, "elephant_congestion": ELEPHANT_CONGESTION,
            "alltoall_algorithm": ALLTOALL_ALGORITHM,
            "placement": plan.placement or "owd learned, baselines hashed",
            "seconds": round(time.monotonic() - started, 1), "cpu_steal": median_steal(runs),
            "summary": summary, "targets": judge(summary),
            "runs": [asdict(r) for r in runs]}


def rejudge(report: dict) -> dict:
    """A saved report with its summary and verdicts worked out again from its runs, by this
    version's rules: a 45-90 minute run need not be repeated to read it another way."""
    try:
        lab = report["lab"]
        topo = topology(lab["fabric"], lab["spines"], lab["mtu"])
        runs = [Run(**r) for r in report["runs"]]
        summary = summarize(topo, runs, report["size_bytes"])
    except (KeyError, TypeError, ValueError, AttributeError, ClockfabricError) as e:
        raise ClockfabricError(f"not a contention report ({type(e).__name__}: {e}); give a JSON file that "
                               "'clockfabric bench contention' wrote") from None
    return {**report, "summary": summary, "targets": judge(summary)}
