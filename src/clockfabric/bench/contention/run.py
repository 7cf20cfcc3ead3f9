"""`clockfabric bench contention`'s run: check the choices, build the lab, run every scenario
with the hosts' agents up, take the lab down; and a saved report judged again."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict

from clockfabric.agent.on_lab import LabAgents
from clockfabric.bench.contention.model import (
    ALLTOALL_ALGORITHM,
    ELEPHANT_CONGESTION,
    FABRIC_RATE,
    FABRICS,
    HOST_RATE,
    MTU,
    MTUS,
    RCVBUF,
    RCVBUF_BUDGET,
    SCENARIOS,
    SPINES,
    WARMUP,
    Run,
    spine_paths,
    topology,
)
from clockfabric.bench.contention.scenarios import run_scenario
from clockfabric.bench.contention.summary import judge, median_steal, summarize
from clockfabric.bench.harness import labs_removed
from clockfabric.collective.options import CollectiveOptions
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build


def check(scenarios: list[str], schedulers: list[str], seeds: int, iters: int, subflows: int | None,
          fabric: str = "leafspine", placement: str = "", spines: int = 2,
          rcvbuf: int | None = RCVBUF, mtu: int = MTU, rcvbuf_budget: int | None = RCVBUF_BUDGET,
          warmup: int = WARMUP) -> None:
    """One clear line for a bad choice, before any lab is built."""
    if fabric not in FABRICS:
        raise ClockfabricError(f"unknown fabric {fabric!r}; choose from {', '.join(FABRICS)}")
    if spines not in SPINES or (fabric == "dualplane" and spines != 2):
        raise ClockfabricError(f"--spines must be one of {', '.join(map(str, SPINES))} on the leafspine fabric "
                               f"(the dualplane fabric has 2 per plane); got {spines}")
    if bad := [s for s in scenarios if s not in SCENARIOS]:
        raise ClockfabricError(f"unknown scenario {bad[0]!r}; choose from {', '.join(SCENARIOS)}")
    if seeds < 1 or iters < 1 or (subflows is not None and subflows < 1):
        raise ClockfabricError("--seeds, --iters and --subflows must be at least 1")
    if warmup < 0:
        raise ClockfabricError(f"--warmup must be at least 0; got {warmup}")
    for scheduler in schedulers:  # each scheduler's options as its runs will make them: a bad one fails here
        CollectiveOptions(scheduler=scheduler, placement=placement, rcvbuf=rcvbuf, rcvbuf_budget=rcvbuf_budget)
    if mtu not in MTUS:
        raise ClockfabricError(f"--mtu must be one of {', '.join(map(str, MTUS))}; got {mtu}")


def run(*, scenarios: list[str], schedulers: list[str], seeds: int, size: int, iters: int,
        subflows: int | None = None, fabric: str = "leafspine", placement: str = "", spines: int = 2,
        rcvbuf: int | None = RCVBUF, mtu: int = MTU, rcvbuf_budget: int | None = RCVBUF_BUDGET,
        warmup: int = WARMUP, standby: bool = True, lab_name: str = "contention",
        progress: Callable[[str], None] = lambda _: None) -> dict:
    """Bring the lab up, run every scenario, take it down; the report (JSON-ready).
    subflows: per peer pair, for every scheduler; by default one per spine path, so that `owd`
    on learned ports can reach every path (with fewer, a fault leaves it fewer to move to).
    placement: "" (each scheduler's own), or "hashed"/"learned" for all. rcvbuf: every
    subflow's receive buffer, bytes, fixed, or None for the kernel's autotuning. rcvbuf_budget:
    what the subflows the agents placed on one spine share instead (None: they keep rcvbuf).
    standby: subflows on learned ports (owd's) get standbys (collective/standby.py)."""
    check(scenarios, schedulers, seeds, iters, subflows, fabric, placement, spines, rcvbuf, mtu, rcvbuf_budget, warmup)
    topo = topology(fabric, spines, mtu)
    subflows = subflows or spine_paths(topo)
    started = time.monotonic()
    with labs_removed(lab_name):
        lab = build.up(topo, lab_name)
        agents = LabAgents(lab, extra=["--no-failover", "--no-steer", "--metrics-port", "0"])
        try:
            progress("starting the hosts' agents")  # the ranks ask theirs where to place subflows and share spines
            agents.start()
            agents.wait_publishing()
            runs = [r for sc in scenarios for r in run_scenario(lab, sc, schedulers, seeds, size=size, iters=iters,
                                                                subflows=subflows, warmup=warmup, progress=progress,
                                                                placement=placement, rcvbuf=rcvbuf,
                                                                rcvbuf_budget=rcvbuf_budget, standby=standby)]
        finally:
            agents.stop()
    summary = summarize(topo, runs, size)
    return {"lab": {"fabric": fabric, "hosts": 8, "leaves": 2, "spines": spines,
                    "planes": 2 if fabric == "dualplane" else 1, "host_rate": HOST_RATE, "fabric_rate": FABRIC_RATE,
                    "mtu": mtu, "buffer_pkts": topo.default_buffer_pkts},
            "size_bytes": size, "warmup": warmup, "iters": iters, "subflows": subflows, "seeds": seeds,
            "rcvbuf_bytes": rcvbuf,
            "rcvbuf_budget_bytes": rcvbuf_budget, "standby": standby, "elephant_congestion": ELEPHANT_CONGESTION,
            "alltoall_algorithm": ALLTOALL_ALGORITHM, "placement": placement or "owd learned, baselines hashed",
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
