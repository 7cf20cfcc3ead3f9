"""What workload monitoring costs a training job: the lab's example DDP job (examples/ddp_train.py,
PyTorch over gloo, fixed seed) on a lab whose hosts all run agents, in pairs of runs: A with the
agents' workload service, B with it left out (`clockfabric agent --disable workload`), the
order alternating from pair to pair so a machine that slows down (or speeds up) over the run
weighs on both alike. The job is named (CLOCKFABRIC_JOB), so in A its flows are found, traced
and sampled as any job's are. Each run's figure is its median step time (the slowest rank's per
step); each pair's, A's over B's."""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from clockfabric.bench.harness import interval, labs_removed, resampled_medians
from clockfabric.clock.evaluate import read_states
from clockfabric.console import out
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build, job
from clockfabric.lab.agents import LabAgents
from clockfabric.lab.state import Lab
from clockfabric.topology import leafspine
from clockfabric.workload.jobs import JOB_ENV

SCRIPT = Path("examples/ddp_train.py")
HOSTS = ["h0", "h1", "h2", "h3"]
SEED = 7
JOB_NAME = "ddp"


@dataclass
class Pairs:
    """Median step time of each run, with workload monitoring (A) and without (B), pair by pair."""

    with_workload: list[float] = field(default_factory=list)
    without: list[float] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # which ran first in each pair: "A" or "B"
    seen: list[dict[str, int]] = field(default_factory=list)  # per A run: what its agents saw of the job
    agent_cpu: dict[str, list[float]] = field(default_factory=lambda: {"A": [], "B": []})  # a core, per agent
    stage_cpu: list[dict[str, float]] = field(default_factory=list)  # per A run: the service's stages, a core per agent

    @property
    def service_cpu(self) -> list[float]:
        """Each pair's agent CPU with the service less without: what the service costs a host."""
        return [a - b for a, b in zip(self.agent_cpu["A"], self.agent_cpu["B"], strict=True)]

    @property
    def ratios(self) -> list[float]:
        return [a / b for a, b in zip(self.with_workload, self.without, strict=True)]

    def interval(self, values: list[float] | None = None) -> list[float]:
        """Around the median of `values` (the pairs' step-time ratios unless given)."""
        return interval(resampled_medians({"v": self.ratios if values is None else values})["v"])

    def median_stages(self) -> dict[str, float]:
        """The service's CPU by stage, each the median over the A runs, largest first."""
        names = {k for run in self.stage_cpu for k in run}
        medians = {k: statistics.median(run.get(k, 0.0) for run in self.stage_cpu) for k in names}
        return dict(sorted(medians.items(), key=lambda kv: -kv[1]))

    def as_dict(self) -> dict:
        return {"with_workload_step_s": self.with_workload, "without_step_s": self.without,
                "first": self.order, "ratio": self.ratios, "seen_with_workload": self.seen,
                "agent_cpu_share": self.agent_cpu, "service_cpu_share": self.service_cpu,
                "stage_cpu_share": self.stage_cpu}


def cpu_s(pid: int, thread: int | None = None) -> float:
    """A live process's CPU seconds so far, user and system, all its threads (or one: `thread`)."""
    stat = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Watch(threading.Thread):
    """While the job runs, the most of its flows the agents published at once, and of those with
    an in-band one-way delay: that A's agents did watch the job (read from their state files)."""

    def __init__(self, agents: LabAgents):
        super().__init__(daemon=True)
        self.agents, self.done = agents, threading.Event()
        self.seen = {"flows": 0, "inband": 0}

    def run(self) -> None:
        while not self.done.wait(1.0):
            flows = [f for s in read_states(self.agents.state_dir).values()
                     for f in s.get("workload", {}).get("flows", []) if f["jobid"] == JOB_NAME]
            inband = [f for f in flows if (f["owd"].get("out") or {}).get("source") == "inband"]
            self.seen = {"flows": max(self.seen["flows"], len(flows)), "inband": max(self.seen["inband"], len(inband))}


def stage_seconds(agents: LabAgents) -> dict[str, float]:
    """The workload service's CPU seconds by stage, summed over the agents (from their state files)."""
    out: dict[str, float] = {}
    for state in read_states(agents.state_dir).values():
        for stage, seconds in state.get("workload", {}).get("cpu_seconds_by_stage", {}).items():
            out[stage] = out.get(stage, 0.0) + seconds
    return out


@dataclass
class Run:
    step_s: float  # the median step
    seen: dict[str, int]  # what the agents saw of the job
    agent_cpu: float  # the share of a core each agent used while the job ran
    stage_cpu: dict[str, float]  # of that, the workload service's, by stage


def one_run(lab: Lab, folder: Path, args: list[str], *, workload: bool) -> Run:
    """Agents on every host (the workload service in them or not), the job run once. The agents
    are stopped before the next run."""
    agents = LabAgents(lab, peers=3, extra=[] if workload else ["--disable", "workload"])
    agents.start()
    watch = Watch(agents)
    try:
        agents.wait_publishing()
        stages_before = stage_seconds(agents)
        before, start = [cpu_s(p.pid) for p in agents.procs], time.monotonic()
        run = job.start(lab, HOSTS, [str(SCRIPT), *args], folder, env={JOB_ENV: JOB_NAME})
        watch.start()
        try:
            result = run.wait(300, stall_s=60)
        finally:
            watch.done.set()
            run.stop()
        if failed := agents.failed():  # an agent that died mid-run would make A look like B
            raise ClockfabricError(f"an agent exited during the job: {failed[0]}")
        used = sum(cpu_s(p.pid) - b for p, b in zip(agents.procs, before, strict=True))
        took = (time.monotonic() - start) * len(agents.procs)
        # the state files lag an update behind, at both ends alike
        stages = {k: (v - stages_before.get(k, 0.0)) / took for k, v in stage_seconds(agents).items()}
    finally:
        agents.stop()
    if result.outcome != "completed" or result.median_step_s is None:
        raise ClockfabricError(f"the DDP job did not complete: {result.error or result.outcome}")
    watch.join(2.0)
    return Run(result.median_step_s, watch.seen, used / took, stages)


def stage_line(shares: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2%}" for k, v in sorted(shares.items(), key=lambda kv: -kv[1])) or "none"


def paired_runs(pairs: int, steps: int) -> Pairs:
    """`pairs` A/B pairs of the DDP job on a lab of its own, removed on the way out."""
    if not SCRIPT.is_file():
        raise ClockfabricError(f"run from the repository root: {SCRIPT} is not here")
    args = ["--steps", str(steps), "--timeout", "60", "--seed", str(SEED)]
    name = f"wlcost-bench-{os.getpid() % 10000}"
    found = Pairs()
    with labs_removed(name), tempfile.TemporaryDirectory(prefix="wlcost-bench-") as tmp:
        lab = build.up(leafspine(len(HOSTS), 2, 1, name="wlcost-bench"), name)
        for i in range(pairs):
            first = "A" if i % 2 == 0 else "B"
            for which in (first, "B" if first == "A" else "A"):
                run = one_run(lab, Path(tmp) / f"pair{i}-{which}", args, workload=which == "A")
                (found.with_workload if which == "A" else found.without).append(run.step_s)
                found.agent_cpu[which].append(run.agent_cpu)
                if which == "A":
                    found.seen.append(run.seen)
                    found.stage_cpu.append(run.stage_cpu)
            found.order.append(first)
            out.print(f"pair {i} ({first} first): with workload monitoring {found.with_workload[-1] * 1e3:.1f} "
                      f"ms/step ({found.seen[-1]['flows']} job flows seen, {found.seen[-1]['inband']} with in-band "
                      f"OWD), without {found.without[-1] * 1e3:.1f} ms/step, ratio {found.ratios[-1]:.4f}; each agent "
                      f"{found.agent_cpu['A'][-1]:.2%} of a core with, {found.agent_cpu['B'][-1]:.2%} without; the "
                      f"service's stages: {stage_line(found.stage_cpu[-1])}")
    return found
