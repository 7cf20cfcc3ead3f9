"""`clockfabric bench failover`: a real DDP job through link failures, without and with agents.

Lab: 4 hosts on 2 planes, each plane 2 leaves x 2 spines (h0, h1 under leaf0; h2, h3 under
leaf1), 100 Mbit/s links; the job (examples/ddp_train.py, gloo) runs one rank per host.
Each scenario runs the same job with no agents and with an agent on every host, under a
30 s collective timeout (what RDMA transports effectively allow) and under gloo's default
(30 min). The failure starts `lead_s` after the job's first step:

  flap-1s, flap-20s, flap-120s   h2's plane-0 NIC link down for that long
  spine-silent                   leaf0-spine0 of plane 0 drops everything for 20 s, carrier up:
                                 the fabric never reroutes (a grey failure); only probing finds it
  flaps-10                       h2's plane-0 NIC: 10 flaps in a minute (3 s down, 3 s up)
  isolated                       both of h2's NICs down for 20 s: no alternate path exists

Per run: the job's outcome (completed / crashed / stalled), detection time (failure to the
first agent decision), time to reroute (failure to the last move off the failed plane),
the worst step over the no-failure run's median step, training time (first step to last;
start-up, mostly importing torch, varies by seconds on a busy machine) over what the
no-failure job's pace gives for as many steps, and the longest stall.
"""

from __future__ import annotations

import json
import math
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import typer
from rich.table import Table

from clockfabric.bench.harness import BENCHMARKS, Target, labs_removed, machine, record
from clockfabric.clock.evaluate import read_states
from clockfabric.console import err, out, print_json, require_root
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build, impair, job
from clockfabric.lab.agents import LabAgents
from clockfabric.lab.exec import command
from clockfabric.lab.state import Lab
from clockfabric.topology import multirail

JOB_HOSTS = ["h0", "h1", "h2", "h3"]
VICTIM = "h2"
TIMEOUTS = {"30s": 30.0, "default": None}
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Scenario:
    name: str
    links: tuple[tuple[str, str], ...]  # failed together
    down_s: float
    count: int = 1
    up_s: float = 0.0
    silent: bool = False

    @property
    def span_s(self) -> float:
        return self.count * self.down_s + (self.count - 1) * self.up_s


SCENARIOS = {s.name: s for s in [
    Scenario("flap-1s", (("h2:eth0", "p0-leaf1"),), 1.0),
    Scenario("flap-20s", (("h2:eth0", "p0-leaf1"),), 20.0),
    Scenario("flap-120s", (("h2:eth0", "p0-leaf1"),), 120.0),
    Scenario("spine-silent", (("p0-leaf0", "p0-spine0"),), 20.0, silent=True),
    Scenario("flaps-10", (("h2:eth0", "p0-leaf1"),), 3.0, count=10, up_s=3.0),
    Scenario("isolated", (("h2:eth0", "p0-leaf1"), ("h2:eth1", "p1-leaf1")), 20.0),
]}


@dataclass
class Run:
    scenario: str
    agent: bool
    timeout: str
    outcome: str = ""
    detection_s: float | None = None
    reroute_s: float | None = None
    worst_step_over_median: float | None = None
    total_over_baseline: float | None = None
    longest_stall_s: float | None = None
    total_s: float | None = None  # launch to end, start-up included
    training_s: float | None = None  # first step's start to the last step's end
    steps: int = 0
    moves: int = 0  # route changes the agents made
    decisions: list[str] = field(default_factory=list)  # "t host kind peer planes", t from the failure
    error: str | None = None


@dataclass
class Bench:
    lab: Lab
    script: Path
    out_dir: Path
    lead_s: float = 8.0
    tail_s: float = 12.0
    hold_down_s: float = 5.0
    baseline: dict = field(default_factory=dict)  # agent -> JobResult of the no-failure run

    # ---- the pieces of one run
    def _clean(self) -> None:
        for i, lk in enumerate(self.lab.topology.links):
            if i in self.lab.failed_links() | self.lab.silent_links():
                impair.set_link(self.lab, lk, up=True)
        for h in self.lab.topology.hosts:  # a previous run's agents may have left routes (fail-static)
            subprocess.run(command(self.lab, h, ["ip", "route", "flush", "proto", "199"]), capture_output=True)

    def _agents(self) -> LabAgents:
        agents = LabAgents(self.lab, peers=3, extra=["--metrics-port", "0", "--hold-down", str(self.hold_down_s)])
        agents.start()
        try:
            agents.wait_heartbeats()
        except ClockfabricError:
            agents.stop()
            raise
        return agents

    def _steps(self, scenario: Scenario | None) -> int:
        step_s = self.baseline[False].median_step_s if False in self.baseline else 0.35
        span = (scenario.span_s if scenario else 0.0) + self.lead_s + self.tail_s
        return max(20, math.ceil(span / step_s))

    def _fail(self, scenario: Scenario, started: threading.Event, record: dict) -> None:
        links = [impair.find_link(self.lab, a, b) for a, b in scenario.links]
        started.wait()
        time.sleep(self.lead_s)
        for i in range(scenario.count):
            for lk in links:
                changed_ns = impair.set_link(self.lab, lk, up=False, silent=scenario.silent)
                record.setdefault("t_ns", changed_ns)  # the failure starts when the kernel is told
            time.sleep(scenario.down_s)
            for lk in links:
                impair.set_link(self.lab, lk, up=True)
            if i + 1 < scenario.count:
                time.sleep(scenario.up_s)
        record["done"] = True

    def run_one(self, scenario: Scenario | None, agent: bool, timeout: str) -> tuple[Run, job.JobResult]:
        name = scenario.name if scenario else "no-failure"
        run = Run(name, agent, timeout)
        self._clean()
        agents = self._agents() if agent else None
        failure: dict = {}
        try:
            steps = self._steps(scenario)
            argv = [str(self.script), "--steps", str(steps)]
            if TIMEOUTS[timeout]:
                argv += ["--timeout", str(TIMEOUTS[timeout])]
            logs = self.out_dir / f"{name}-{'agent' if agent else 'none'}-{timeout}"
            j = job.start(self.lab, JOB_HOSTS, argv, logs)
            started = threading.Event()
            injector = threading.Thread(target=self._fail, args=(scenario, started, failure), daemon=True) \
                if scenario else None
            if injector:
                injector.start()
            while j.running() and not _steps_logged(j):
                time.sleep(0.1)
            started.set()
            span = scenario.span_s if scenario else 0.0
            result = j.wait(timeout=steps * 2.0 + span + 240, stall_s=span + 90)
            if injector:
                injector.join()
        finally:
            if agents:
                time.sleep(0.5)
                decisions = [d | {"host": h} for h, s in read_states(agents.state_dir).items()
                             for d in s.get("failover", {}).get("decisions", [])]
                agents.stop()
            else:
                decisions = []
            self._clean()
        self._judge(run, result, failure, decisions, scenario)
        return run, result

    def _judge(self, run: Run, result: job.JobResult, failure: dict, decisions: list[dict],
               scenario: Scenario | None) -> None:
        run.outcome, run.steps, run.total_s, run.error = result.outcome, result.steps, result.total_s, result.error
        run.longest_stall_s = round(result.longest_stall_s, 3)
        base = self.baseline.get(False)
        if base and base.median_step_s and result.step_s:
            run.worst_step_over_median = round(max(result.step_s) / base.median_step_s, 2)
        run.training_s = round(_training_s(result), 2) if result.total_s else None
        if base and result.outcome == "completed" and result.steps:
            # against the no-failure job's pace over as many steps; training time only, since
            # start-up (importing torch) varies by seconds on a busy machine
            run.total_over_baseline = round(_training_s(result) / (result.steps * _training_s(base) / base.steps), 3)
        decisions.sort(key=lambda d: d["t_ns"])
        run.moves = sum(d["kind"] == "moved" for d in decisions)
        t0 = failure.get("t_ns")
        run.decisions = [f"{(d['t_ns'] - (t0 or d['t_ns'])) / 1e9:+.3f}s {d['host']} {d['kind']} {d['peer']} "
                         f"{d['planes']} {d['reason']}".rstrip() for d in decisions]
        if t0 is None or scenario is None:
            return
        first = [d for d in decisions if d["t_ns"] >= t0 and d["kind"] in ("detected", "isolated", "unreachable")]
        if first:
            run.detection_s = round((first[0]["t_ns"] - t0) / 1e9, 3)
        # the reroute is done when the last move of the first failure is made
        window_end = t0 + (scenario.down_s + 5) * 1e9
        moves = [d for d in decisions if t0 <= d["t_ns"] <= window_end and d["kind"] == "moved"]
        if moves:
            run.reroute_s = round((moves[-1]["t_ns"] - t0) / 1e9, 3)


def _training_s(result: job.JobResult) -> float:
    if result.total_s is None:  # no rank ever ended
        raise ClockfabricError(f"the training job {result.outcome} with no end time: no training time to compare")
    return result.total_s - (result.startup_s or 0.0)


def _steps_logged(j: job.Job) -> list[dict]:
    try:
        return [r for r in job.read_log(j.logs[0]) if "step" in r]
    except OSError:
        return []


def run(scenarios: list[str], *, agent_modes: list[bool], timeouts: list[str], out_dir: Path, script: Path,
        hold_down_s: float = 5.0, progress: Progress = print) -> dict:
    """Bring up the lab, run the no-failure baselines, then every scenario; always take it down."""
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise ClockfabricError(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}")
    if not script.exists():
        raise ClockfabricError(f"job script {script} not found; run from the repository or give --script")
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"failover-bench-{int(time.time()) % 100000}"
    runs: list[Run] = []
    with labs_removed(name):
        lab = build.up(multirail(4, 2, 2, 2, name="failover-bench"), name)
        bench = Bench(lab, script, out_dir, hold_down_s=hold_down_s)
        for agent in (False, True):
            progress(f"no-failure job, agents {'on' if agent else 'off'}")
            r, result = bench.run_one(None, agent, "30s")
            if result.outcome != "completed":
                raise ClockfabricError(f"the no-failure job did not complete ({result.outcome}: {result.error}); "
                                       f"see {out_dir}")
            bench.baseline[agent] = result
            runs.append(r)
        for s in scenarios:
            for agent in agent_modes:
                for timeout in timeouts:
                    progress(f"{s}, agents {'on' if agent else 'off'}, collective timeout {timeout}")
                    r, _ = bench.run_one(SCENARIOS[s], agent, timeout)
                    runs.append(r)
                    progress(f"  -> {r.outcome}, detection {r.detection_s} s, reroute {r.reroute_s} s, "
                             f"total x{r.total_over_baseline}")
    base = bench.baseline
    report = {
        "lab": "4 hosts, 2 planes x (2 leaves, 2 spines), 100 Mbit/s", "job_hosts": JOB_HOSTS,
        "baseline": {"median_step_s": base[False].median_step_s, "training_s": round(_training_s(base[False]), 2),
                     "agents_training_over_none": round(_training_s(base[True]) / _training_s(base[False]), 3)},
        "hold_down_s": hold_down_s, "runs": [asdict(r) for r in runs],
    }
    (out_dir / "failover.json").write_text(json.dumps(report, indent=2))
    return report


def soak(seconds: float, *, out_dir: Path, hold_down_s: float = 5.0, progress: Progress = print) -> dict:
    """Agents on a healthy fabric under saturating background TCP for `seconds`: every move is
    a false alarm."""
    from clockfabric.lab import traffic

    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"failover-soak-{int(time.time()) % 100000}"
    with labs_removed(name):
        lab = build.up(multirail(4, 2, 2, 2, name="failover-soak"), name)
        bench = Bench(lab, Path("."), out_dir, hold_down_s=hold_down_s)
        agents = bench._agents()
        flows = [("h0", "h2"), ("h3", "h1"), ("h1", "h0"), ("h2", "h3")]  # across the spines and within leaves
        progress(f"soak: {seconds:g} s of {len(flows)} saturating TCP flows (2 streams each), agents on")
        results: list[dict] = []
        errors: list[str] = []

        def flow(a: str, b: str) -> None:
            try:
                results.append(traffic.run(lab, a, b, seconds=seconds, streams=2))
            except ClockfabricError as e:  # the traffic's own failure: reported, the soak still counts
                errors.append(str(e))

        threads = [threading.Thread(target=flow, args=ab, daemon=True) for ab in flows]
        try:
            for t in threads:
                t.start()
            deadline = time.monotonic() + seconds + 60
            for t in threads:
                t.join(max(0.0, deadline - time.monotonic()))
            decisions = [d for s in read_states(agents.state_dir).values()
                         for d in s.get("failover", {}).get("decisions", [])]
            counters = [s["failover"]["counters"] for s in read_states(agents.state_dir).values()]
        finally:
            agents.stop()
    report = {"seconds": seconds, "flows": [f"{a}->{b}" for a, b in flows],
              "throughput_mbps": [round(r["received_bps"] / 1e6, 1) for r in results],
              "retransmits": [r.get("retransmits") for r in results], "traffic_errors": errors,
              "decisions": [d["kind"] for d in decisions], "moves": sum(d["kind"] == "moved" for d in decisions),
              "heartbeats_sent": sum(c["heartbeats_sent"] for c in counters),
              "heartbeats_received": sum(c["heartbeats_received"] for c in counters)}
    (out_dir / "failover-soak.json").write_text(json.dumps(report, indent=2))
    return report


def _fmt(value, suffix: str = "") -> str:
    return "-" if value is None else f"{value:g}{suffix}"


def targets(report: dict) -> list[Target]:
    """With the agents on, every failure a path survives is survived: the share of those runs
    whose job completed, against the same runs without agents."""
    survivable = [r for r in report["runs"] if r["scenario"] != "isolated" and r["scenario"] in SCENARIOS]

    def completed(agent: bool) -> float | None:
        runs = [r for r in survivable if r["agent"] == agent]
        return round(sum(r["outcome"] == "completed" for r in runs) / len(runs), 3) if runs else None

    return [Target("jobs completed through survivable failures, agents on", completed(True), 1.0,
                   baseline=completed(False))]


@BENCHMARKS.register("failover")
def failover(scenarios: str = typer.Option("flap-1s,flap-20s,flap-120s,spine-silent,flaps-10,isolated",
                                           "--scenarios", help="Comma-separated scenarios to run."),
             agents: str = typer.Option("both", "--agents", help="Run with agents: both, on or off."),
             timeouts: str = typer.Option("30s,default", "--timeouts",
                                          help="Collective timeouts to run: 30s (like RDMA), default (gloo's)."),
             soak_s: float = typer.Option(0.0, "--soak", help="Instead: this many seconds on a healthy fabric "
                                                             "under background TCP, counting false reroutes."),
             hold_down: float = typer.Option(5.0, "--hold-down", help="The agents' hold-down, seconds."),
             script: Path = typer.Option(Path("examples/ddp_train.py"), "--script", help="The DDP job."),
             out_dir: Path = typer.Option(Path("bench/results/failover"), "--out",
                                          help="Where its report and job logs go (the record: "
                                               "bench/results/failover.json)."),
             as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts.")) -> None:
    """A real DDP job through link and NIC failures, without and with the agents."""
    require_root()
    modes = {"both": [False, True], "on": [True], "off": [False]}.get(agents)
    if modes is None:
        raise ClockfabricError(f"--agents must be both, on or off (got {agents!r})")
    chosen_timeouts = [t.strip() for t in timeouts.split(",") if t.strip()]
    if bad := [t for t in chosen_timeouts if t not in TIMEOUTS]:
        raise ClockfabricError(f"--timeouts: {bad[0]!r} is not one of {', '.join(TIMEOUTS)}")
    started = time.monotonic()

    def progress(line: str) -> None:
        err.print(f"[dim]{time.monotonic() - started:6.0f}s[/] {line}", highlight=False)

    if soak_s > 0:
        report = soak(soak_s, out_dir=out_dir, hold_down_s=hold_down, progress=progress)
        if as_json:
            print_json(report)
        else:
            out.print(f"soak {soak_s:g} s: {report['moves']} reroutes on a healthy fabric; "
                      f"decisions {report['decisions'] or 'none'}; throughput {report['throughput_mbps']} Mbit/s")
            for e in report["traffic_errors"]:
                err.print(f"[yellow]background traffic: {e}")
        return
    facts = machine()
    report = run([s.strip() for s in scenarios.split(",") if s.strip()], agent_modes=modes,
                 timeouts=chosen_timeouts, out_dir=out_dir, script=script, hold_down_s=hold_down,
                 progress=progress)
    record("failover", targets(report), facts, report)
    if as_json:
        print_json(report)
        return
    table = Table(title=f"failover: DDP job on 4 hosts, no-failure training {report['baseline']['training_s']:.1f} s, "
                        f"median step {report['baseline']['median_step_s']:.3f} s")
    for col in ("scenario", "agents", "timeout", "outcome", "detection", "reroute", "worst step / median",
                "training / no-failure", "longest stall", "moves"):
        table.add_column(col)
    for r in report["runs"]:
        table.add_row(r["scenario"], "on" if r["agent"] else "off", r["timeout"], r["outcome"],
                      _fmt(r["detection_s"], " s"), _fmt(r["reroute_s"], " s"), _fmt(r["worst_step_over_median"], "x"),
                      _fmt(r["total_over_baseline"], "x"), _fmt(r["longest_stall_s"], " s"), str(r["moves"]))
    out.print(table)
    err.print(f"JSON and job logs in {out_dir}")
