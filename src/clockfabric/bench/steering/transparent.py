"""Transparent mode: an unmodified DDP job with plane 0 loaded by elephants, without agents and
with agents steering its flows (`clockfabric agent --steer`), repeats interleaved.

Lab: a dual-plane multirail lab (default 8 hosts, 2 planes, 2 leaves x 2 spines per plane,
25 Mbit/s links: what the 2 cores forward). The job (examples/ddp_train.py, PyTorch DDP over
gloo, through clockfabric.lab.job, unmodified: its connections are bound to the hosts' stable
addresses and hash onto a plane each) runs one rank on each of the first two hosts of each
leaf. The other hosts run iperf3 elephants between the leaves on plane 0 only (bound to their
plane-0 NIC addresses), both ways: each leaf's plane-0 uplinks are full, and a job flow that
hashed onto plane 0 across the leaves (data, or the ACKs of data coming the other way) shares
a standing queue with them. (With --hosts 12 the elephants alone overload the uplinks twice
over; there the heartbeats lose so many rounds that failover moves whole peers first.)

For each repeat, in alternating order: the job with no agent, and the job with an agent on
each job host in transparent mode (the elephants' hosts run none: their flows are not the
job's, and their NIC-bound flows are never candidates anyway). Before the repeats, once
each: the job on the quiet fabric with no agent and with agents (the reference pace, and the
agents' false moves where nothing is congested).

Per run: the job's training time (first step to the end; start-up, mostly importing torch,
varies by seconds here), total time, median step, how many of the job's leaf-crossing
flows hashed onto plane 0 (the exposure, from `ip route get` with the flow's ports, or the
plane a steering rule records as the origin), and the agents' moves.

    sudo clockfabric bench transparent [--repeats 3] [--steps 30] [--rate 25mbit] [--out PATH]
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from clockfabric.bench import harness
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, record
from clockfabric.bench.steering.transparent_trace import Elephants, Tracer, exposure, sh
from clockfabric.clock.evaluate import read_states
from clockfabric.console import require_root
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build, job
from clockfabric.lab.agents import LabAgents
from clockfabric.lab.state import Lab
from clockfabric.topology import multirail

DEFAULT_JSON = RESULTS / "transparent.json"
SCRIPT = Path("examples/ddp_train.py")
TARGET_RATIO = 1.3  # the job's time without agents over with them, under elephants

out = Console()
if not out.is_terminal:
    out = Console(width=160)
err = Console(stderr=True)


def layout(hosts: int) -> tuple[list[str], list[tuple[str, str]]]:
    """The job's hosts (two per leaf) and the elephants (src, dst), both ways between the leaves."""
    half = hosts // 2
    job_hosts = ["h0", "h1", f"h{half}", f"h{half + 1}"]
    rest0 = [f"h{i}" for i in range(2, half)]
    rest1 = [f"h{i}" for i in range(half + 2, hosts)]
    return job_hosts, list(zip(rest0, rest1, strict=True)) + list(zip(rest1, rest0, strict=True))


def clean(lab: Lab) -> None:
    """What agents leave on purpose (fail-static): their rules, tables and routes."""
    for h in lab.topology.hosts:
        sh(lab, h, "ip rule flush protocol 199; ip route flush proto 199; "
                   "for t in 19900 19901; do ip route flush table $t 2>/dev/null; done; true")


def start_agents(lab: Lab, hosts: list[str]) -> LabAgents:
    agents = LabAgents(lab, peers=3, extra=["--metrics-port", "0", "--steer"])
    agents.hosts = sorted(hosts)
    agents.start()
    try:
        agents.wait_heartbeats(timeout_s=90)
    except ClockfabricError:
        agents.stop()
        raise
    return agents


def run_job(lab: Lab, hosts: list[str], steps: int, logs: Path, *, agents_on: bool, loaded: bool,
            elephants: Elephants, warm_s: float, trace_s: float = 0.0) -> dict:
    leaf_of = {h: lk.b.node for lk in lab.topology.links for h in [lk.a.node]
               if h in lab.topology.hosts and lk.a.iface == "eth0"}
    clean(lab)
    agents = None
    rec: dict = {"agents": agents_on, "elephants": loaded}
    decisions: list[dict] = []
    try:
        if loaded:
            elephants.start()
            time.sleep(warm_s)
        if agents_on:
            agents = start_agents(lab, hosts)
        j = job.start(lab, hosts, [str(SCRIPT), "--steps", str(steps), "--timeout", "300"], logs)
        deadline = time.monotonic() + 120
        while j.running() and time.monotonic() < deadline and not all(
                any(r.get("event") == "ready" for r in job.read_log(p)) for p in j.logs):
            time.sleep(0.2)
        rec["exposure"] = exposure(lab, j, leaf_of) if j.running() else {}
        tracer = Tracer(lab, hosts, trace_s) if trace_s else None
        if tracer:
            tracer.start()
        result = j.wait(timeout=steps * 30 + 300, stall_s=240)
        if tracer:
            rec["trace"] = tracer.finish()
        if loaded:
            rec["elephant_mbps_per_sender"] = elephants.mbps()
        if agents:
            time.sleep(0.6)
            decisions = [d | {"host": h} for h, s in read_states(agents.state_dir).items()
                         for d in s.get("failover", {}).get("decisions", [])]
            rec["steer_counters"] = {h: s.get("failover", {}).get("steer", {}).get("counters")
                                     for h, s in read_states(agents.state_dir).items()}
    finally:
        if agents:
            agents.stop()
        elephants.stop()
        clean(lab)
    decisions.sort(key=lambda d: d["t_ns"])
    training = result.total_s - (result.startup_s or 0.0) if result.total_s else None
    rec |= {"outcome": result.outcome, "steps": result.steps, "error": result.error,
            "training_s": round(training, 2) if training else None,
            "total_s": round(result.total_s, 2) if result.total_s else None,
            "median_step_s": round(result.median_step_s, 3) if result.median_step_s else None,
            "steered": sum(d["kind"] == "steered" for d in decisions),
            "unsteered": sum(d["kind"] == "unsteered" for d in decisions),
            "failover_moves": sum(d["kind"] == "moved" for d in decisions),
            "decisions": [f"{(d['t_ns'] - decisions[0]['t_ns']) / 1e9:+.2f}s {d['host']} {d['kind']} {d['peer']} "
                          f"{d['planes']} {d.get('flow', '')} {d['reason']}".rstrip() for d in decisions]}
    return rec


def write_traces(data: dict, path: Path) -> Path | None:
    """The runs' traces, if any, taken out of `data` and written beside its record at `path`
    (NAME-trace.json, one sample a line)."""
    traces = {str(i): r.pop("trace") for i, r in enumerate(data["runs"]) if r.get("trace")}
    if not traces:
        return None
    side = path.with_name(f"{path.stem}-trace.json")
    lines = [f'"{i}": [\n' + ",\n".join(
        json.dumps({"t": smp["t"], "nic_tx_mbps": smp.get("nic_tx_mbps"),
                    "flows": {k: [v["out"], v["in"], v["plane"], v["by"], v["rtt_ms"]]
                              for k, v in smp["flows"].items()}},
                   separators=(",", ":")) for smp in rows) + "\n]" for i, rows in traces.items()]
    side.parent.mkdir(parents=True, exist_ok=True)
    side.write_text("{\"format\": \"per run (index into runs): samples; flows: [out Mbit/s, in Mbit/s, plane, "
                    "by (rule, failover, hash), rtt ms]\",\n" + ",\n".join(lines) + "}\n")
    return side


@BENCHMARKS.register("transparent")
def main(hosts: int = typer.Option(8, min=8, help="Lab hosts (even; 4 run the job, the rest the elephants)."),
         rate: str = typer.Option("25mbit", help="Every link's rate."),
         steps: int = typer.Option(30, min=5, help="Training steps per job."),
         repeats: int = typer.Option(3, min=1, help="Pairs of runs (no agent, agents), order alternating."),
         streams: int = typer.Option(4, min=1, help="TCP streams per elephant."),
         warm_s: float = typer.Option(4.0, "--warm-s", help="Seconds the elephants run before the job starts."),
         trace_s: float = typer.Option(3.0, "--trace-s", min=0.0,
                                       help="Sample the job's busy connections this often (0: not at all)."),
         reference: bool = typer.Option(True, "--reference/--no-reference",
                                        help="First run the job on the quiet fabric, without and with agents."),
         name: str = typer.Option("steer-bench", help="Name of the lab this benchmark brings up."),
         json_path: Path = typer.Option(DEFAULT_JSON, "--out", help="Where the record goes.")) -> None:
    """Transparent mode: a DDP job under elephant flows, agents off against agents steering."""
    require_root()
    if hosts % 2:
        raise ClockfabricError(f"--hosts must be even (two leaves); got {hosts}")
    job_hosts, pairs = layout(hosts)
    info = harness.machine()
    started = time.monotonic()
    runs: list[dict] = []
    status, code = "ok", 0

    def note(line: str) -> None:
        err.print(f"[dim]{time.monotonic() - started:6.0f}s[/] {line}", highlight=False)

    logs = Path("/tmp") / f"{name}-logs"
    try:
        lab = build.up(multirail(hosts, 2, 2, 2, host_rate=rate, name="transparent"), name)
        note(f"lab {name} up: {hosts} hosts; job on {', '.join(job_hosts)}; "
             f"elephants {', '.join(f'{a}->{b}' for a, b in pairs)} on plane 0, {streams} streams each")
        elephants = Elephants(lab, pairs, streams)
        plan = [("reference", False, False), ("reference", True, False)] if reference else []
        for r in range(repeats):
            order = (False, True) if r % 2 == 0 else (True, False)
            plan += [(f"repeat {r + 1}", a, True) for a in order]
        for label, agents_on, loaded in plan:
            load = "elephants" if loaded else "quiet fabric"
            note(f"{label}: {load}, agents {'on (--steer)' if agents_on else 'off'}")
            rec = run_job(lab, job_hosts, steps, logs / f"{len(runs)}", agents_on=agents_on, loaded=loaded,
                          elephants=elephants, warm_s=warm_s, trace_s=trace_s)
            rec["label"] = label
            runs.append(rec)
            note(f"  -> {rec['outcome']}, training {rec['training_s']} s, median step {rec['median_step_s']} s, "
                 f"exposure {rec.get('exposure', {}).get('on_plane0')}/{rec.get('exposure', {}).get('of')} "
                 f"on plane 0, steered {rec['steered']}, back {rec['unsteered']}, failover {rec['failover_moves']}")
    except KeyboardInterrupt:
        status, code = "interrupted", 130
    except ClockfabricError as e:
        status, code = f"failed: {e}", 1
        err.print(f"[red]benchmark failed:[/] {e}")
    finally:
        build.down(name)
    info = harness.finish(info)

    pairs_out = []
    for r in range(repeats):
        pair = {a["agents"]: a for a in runs if a["label"] == f"repeat {r + 1}"}
        if pair.get(False, {}).get("training_s") and pair.get(True, {}).get("training_s"):
            pairs_out.append({"repeat": r + 1, "none_s": pair[False]["training_s"],
                              "agents_s": pair[True]["training_s"],
                              "ratio": round(pair[False]["training_s"] / pair[True]["training_s"], 3),
                              "exposure_none": pair[False].get("exposure", {}).get("on_plane0"),
                              "exposure_agents": pair[True].get("exposure", {}).get("on_plane0"),
                              "steered": pair[True]["steered"], "unsteered": pair[True]["unsteered"]})
    summary = {}
    if pairs_out:
        summary = {"ratio_mean": round(statistics.mean(p["ratio"] for p in pairs_out), 3),
                   "ratio_of_totals": round(sum(p["none_s"] for p in pairs_out) / sum(p["agents_s"] for p in pairs_out),
                                            3),
                   "ratio_min": min(p["ratio"] for p in pairs_out), "ratio_max": max(p["ratio"] for p in pairs_out),
                   "steered_total": sum(p["steered"] for p in pairs_out), "target_ratio": TARGET_RATIO}

    table = Table(title=f"transparent mode: DDP job (gloo) on {', '.join(job_hosts)}, {hosts}-host dual-plane lab, "
                        f"{rate} links, plane 0 loaded; {info['cores']} CPUs, "
                        f"load {' '.join(info['loadavg_start'])} -> "
                        f"{' '.join(info['loadavg_end'])}")
    for col in ("run", "elephants", "agents", "outcome", "training (s)", "median step (s)", "crossing flows on p0",
                "steered", "back", "failover moves"):
        table.add_column(col, justify="right")
    for rec in runs:
        exp = rec.get("exposure") or {}
        table.add_row(rec["label"], "yes" if rec["elephants"] else "no", "steer" if rec["agents"] else "-",
                      rec["outcome"], str(rec["training_s"]), str(rec["median_step_s"]),
                      f"{exp.get('on_plane0')}/{exp.get('of')}", str(rec["steered"]), str(rec["unsteered"]),
                      str(rec["failover_moves"]))
    out.print(table)
    for p in pairs_out:
        out.print(f"repeat {p['repeat']}: no agent {p['none_s']} s, agents {p['agents_s']} s: "
                  f"[bold]{p['ratio']:.2f}x[/] (crossing flows on plane 0: {p['exposure_none']} without, "
                  f"{p['exposure_agents']} with; moves {p['steered']} out, {p['unsteered']} back)")
    if summary:
        out.print(f"job time ratio (no agent / agents): mean {summary['ratio_mean']:.2f}x, "
                  f"of totals {summary['ratio_of_totals']:.2f}x, range {summary['ratio_min']:.2f}-"
                  f"{summary['ratio_max']:.2f}x; target >= 1.3x")
    data = {"benchmark": "transparent", "status": status, "machine": info,
            "params": {"hosts": hosts, "planes": 2, "leaves": 2, "spines": 2, "rate": rate, "steps": steps,
                       "repeats": repeats, "job_hosts": job_hosts, "elephants": [f"{a}->{b}" for a, b in pairs],
                       "elephant_streams": streams, "warm_s": warm_s, "trace_s": trace_s,
                       "job": "examples/ddp_train.py defaults (0.66M params, gloo), --timeout 300",
                       "time": "training: first step's start to the last rank's end (start-up excluded)"},
            "summary": summary, "pairs": pairs_out, "runs": runs}
    json_file = Path(json_path)
    side = write_traces(data, json_file)
    record("transparent", [Target("DDP job under elephants: training time without agents over with",
                                  summary.get("ratio_of_totals"), TARGET_RATIO, "x")] if summary else [],
           info, data, path=json_file)
    err.print(f"results written to {json_file}" + (f" (traces: {side})" if side else ""))
    raise typer.Exit(code)
