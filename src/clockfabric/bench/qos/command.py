"""`clockfabric bench qos`: the lab's example DDP job (examples/ddp_train.py, 4 ranks, one per
host of a 4-host leaf-spine, every ring hop across the spine) named `ddp`, beside a scavenger
bulk job (`bulk`: iperf3, 4 TCP streams h0 -> h2 and h3 -> h1, on the DDP job's host links and
uplinks), on each fabric asked for (`--fabric`):

  classes  every port with the lab's traffic classes (topology/classes.py), the collective class
           guaranteed COLLECTIVE_SHARE of each link, as an AI fabric configures them;
  fifo     one FIFO per port.

Per fabric, three runs, each with an agent on every host: the DDP job alone, beside the bulk job
without QoS (no policy), and beside it with QoS (`ddp` critical, `bulk` scavenger, from the
agents' --qos-file). Figures: each run's median step; the slowdown without QoS (to be >= 1.3x:
the scenario is contended) and with QoS (<= 1.05x); the share the bulk job took of what the DDP
job left of h0's link (>= 80%: no starvation; the DDP job's bytes are its alone run's, the same
model and steps), and where that was: inside the DDP job's steps or outside them (bench/qos/split.py);
the agents' CPU with QoS less without (what QoS costs a host).

On one FIFO a fourth run times the reaction: with QoS, the bulk job starts only once the DDP job
has done ONSET_STEP steps, and the figure is the time from its onset (its first data connection
up, not the moment it was asked to start) to the end of the DDP
job's slowed steps: the step running at the onset and those after it, up to the first one back
within 1.05x of its alone median (0: the step at the onset was not slowed). A later step's
spread (a step 5% slow now and then, onset or not) is the job's own, not the onset's.

    sudo clockfabric bench qos [--fabric classes --fabric fifo] [--steps 30] [--rate 50mbit]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import typer

from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, labs_removed, machine, record, targets_table
from clockfabric.bench.qos.split import LinkSampler, split, split_note
from clockfabric.bench.workload.cost_ddp import cpu_s
from clockfabric.clock.evaluate import read_states
from clockfabric.console import out, print_json, require_root
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build, job, process
from clockfabric.lab.agents import LabAgents
from clockfabric.lab.exec import command
from clockfabric.lab.state import Lab
from clockfabric.lab.traffic import iperf_server
from clockfabric.topology import TrafficClasses, leafspine
from clockfabric.topology.rates import parse_rate
from clockfabric.train.report import read_log
from clockfabric.workload.jobs import JOB_ENV
from clockfabric.workload.sockets import KernelSockets

SCRIPT = Path("examples/ddp_train.py")
HOSTS = ["h0", "h1", "h2", "h3"]
BULK = [("h0", "h2"), ("h3", "h1")]
BULK_PORT, SEED = 5340, 7
COLLECTIVE_SHARE = 90.0  # of every link, for the collective class (priority keeps its 5% cap)
# on one FIFO a mark changes no queue: the hosts pace the scavenger's sockets (agent/qos_pace.py);
# with classes they pace it too, under the share the switches guarantee it
PACED_NOTE = {"fifo": "; one FIFO: the hosts pace the scavenger's sockets",
              "classes": "; the switches sort by class, and the hosts pace the scavenger's sockets"}
POLICIES = [{"jobid": "ddp", "class": "critical"}, {"jobid": "bulk", "class": "scavenger"}]
SEGMENT_HEADER = 14 + 20 + 32  # Ethernet, IPv4, TCP with timestamps: a segment's bytes beyond its payload
ONSET_STEP = 8
SLOWED = 1.05  # a step over this times the alone median was slowed


def tx_bytes(lab: Lab, host: str) -> int:
    from clockfabric.lab import netns

    with netns.ipr(lab.ns(host)) as ipr:
        return ipr.get_links(ipr.link_lookup(ifname="eth0")[0])[0].get_attr("IFLA_STATS64")["tx_bytes"]


class H0Counters:
    """h0's NIC bytes and the bulk job's wire bytes (tcp_info: payload acknowledged, a header a
    segment), read from this process with no process started: one would be a process every
    agent's QoS service reads between updates, and count in what QoS costs. The NIC's from the
    interface table of a process living in h0's namespace (its agent), the sockets' from a
    sock_diag socket opened there."""

    def __init__(self, lab: Lab, h0_pid: int):
        from clockfabric.lab import netns

        with netns.entered(lab.ns("h0")):
            self.sockets = KernelSockets()
        self.dev = Path(f"/proc/{h0_pid}/net/dev")
        self.ports = {BULK_PORT + i for i, (src, _) in enumerate(BULK) if src == "h0"}

    def tx(self) -> int:
        for line in self.dev.read_text().splitlines():
            name, _, counters = line.partition(":")
            if name.strip() == "eth0":
                return int(counters.split()[8])
        raise ClockfabricError(f"{self.dev} has no eth0")

    def bulk(self) -> int:
        return sum(r.bytes_acked + r.data_segs_out * SEGMENT_HEADER
                   for r in self.sockets() if r.key.rport in self.ports)

    def close(self) -> None:
        self.sockets.close()


def bulk_wire_bytes(lab: Lab, host: str) -> int:
    """What the bulk job's TCP sockets on `host` have put on the wire so far: each one's payload
    sent, retransmissions too (tcp_info's bytes_sent), and a header a segment (segs_out; IPv4, TCP
    with timestamps, Ethernet), as the NIC's own byte counter counts them."""
    ports = " or ".join(f"dport = :{BULK_PORT + i}" for i, (src, _) in enumerate(BULK) if src == host)
    got = subprocess.run(command(lab, host, ["ss", "-tinH", "state", "established", f"( {ports} )"]),
                         capture_output=True, text=True, timeout=30)
    if got.returncode:
        raise ClockfabricError(f"ss on {host}: {got.stderr.strip()}")
    fields = dict.fromkeys(("bytes_sent", "segs_out"), 0)
    for name, value in re.findall(r"\b(bytes_sent|segs_out):(\d+)", got.stdout):
        fields[name] += int(value)
    return fields["bytes_sent"] + fields["segs_out"] * SEGMENT_HEADER


def start_bulk(lab: Lab) -> tuple[list, float]:
    """The bulk job's servers and clients, and its onset: when its first data connection was up
    (its data follows at once), not when it was asked to start (a process's start is not the
    scavenger's doing, nor QoS's)."""
    procs, clients = [], []
    try:
        for i, (src, dst) in enumerate(BULK):
            address = str(lab.topology.hosts[dst].address)
            procs.append(iperf_server(lab, dst, address, BULK_PORT + i))
            client = lab.spawn(src, ["env", f"{JOB_ENV}=bulk", "iperf3", "-c", address, "-p", str(BULK_PORT + i),
                                     "-P", "4", "-t", "3600"], "bulk job", log=lab.dir / "logs" / f"bulk-{src}.log")
            procs.append(client)
            clients.append((client.pid, BULK_PORT + i))
        asked = time.monotonic()
        onset_at = _first_data_at(clients)
        time.sleep(max(0.0, 2.0 - (time.monotonic() - asked)))  # the streams reach their rate
    except BaseException:
        process.stop(procs)
        raise
    return procs, onset_at


def _first_data_at(clients: list[tuple[int, int]], timeout_s: float = 10.0) -> float:
    """When one of the clients had a data connection up: a second established connection to its
    server's port (iperf3 opens its control connection first), read from its netns' /proc table."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pid, port in clients:
            try:
                rows = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
            except OSError:
                continue
            up = sum(1 for r in rows if (f := r.split()) and f[3] == "01" and int(f[2].split(":")[1], 16) == port)
            if up >= 2:
                return time.time()
        time.sleep(0.005)
    raise ClockfabricError(f"the bulk job opened no data connection in {timeout_s:.0f} s")


def one_run(lab: Lab, folder: Path, steps: int, rate_bps: int, *, bulk: bool, qos: bool,
            onset_step: int | None = None) -> dict:
    """One DDP job with an agent on every host; the bulk job beside it from the start, or from
    `onset_step` steps in. h0's link (`rate_bps`) is split inside and outside the DDP job's steps."""
    policy_file = folder / "qos.json"
    folder.mkdir(parents=True, exist_ok=True)
    policy_file.write_text(json.dumps(POLICIES if qos else []))
    agents = LabAgents(lab, peers=1, extra=["--metrics-port", "0", "--qos-file", str(policy_file)])
    procs = []
    agents.start()
    try:
        agents.wait_publishing()
        if bulk and onset_step is None:
            procs = start_bulk(lab)[0]
        bulk0 = bulk_wire_bytes(lab, "h0") if procs else 0
        cpu0, tx0, t0 = [cpu_s(p.pid) for p in agents.procs], tx_bytes(lab, "h0"), time.monotonic()
        main0 = [main_thread_cpu_s(p.pid) for p in agents.procs]
        qos0 = _qos_cpu_s(agents.state_dir)
        run = job.start(lab, HOSTS, [str(SCRIPT), "--steps", str(steps), "--timeout", "120", "--seed", str(SEED)],
                        folder / "job", env={JOB_ENV: "ddp"})
        onset_at = None
        try:
            with (closing(H0Counters(lab, agents.procs[agents.hosts.index("h0")].pid)) as counters,
                  LinkSampler(counters.tx, counters.bulk if procs else None) as sampler):
                if bulk and onset_step is not None:
                    _await_steps(run, onset_step, steps * 30 + 300)
                    procs, onset_at = start_bulk(lab)
                result = run.wait(steps * 30 + 300, stall_s=150)
        finally:
            run.stop()
        took = time.monotonic() - t0
        def per_agent(read: Callable[[int], float], before: list[float]) -> float:  # a core's share
            return sum(read(p.pid) - b for p, b in zip(agents.procs, before, strict=True)) / took / len(agents.procs)
        cpu, main = per_agent(cpu_s, cpu0), per_agent(main_thread_cpu_s, main0)
        qos_cpu = (_qos_cpu_s(agents.state_dir) - qos0) / took / len(agents.procs)
        sent = tx_bytes(lab, "h0") - tx0
        bulk_sent = bulk_wire_bytes(lab, "h0") - bulk0 if procs and onset_at is None else None
        qos_state = {h: s.get("qos", {}) for h, s in read_states(agents.state_dir).items()}
    finally:
        process.stop(procs)
        agents.stop()
    if result.outcome != "completed" or result.median_step_s is None:
        raise ClockfabricError(f"the DDP job did not complete: {result.error or result.outcome}")
    steps_done = [(r["start"], r["duration_s"]) for r in read_log(run.logs[0]) if "duration_s" in r]
    return {"bulk": bulk, "qos": qos, "median_step_s": result.median_step_s, "seconds": took, "h0_tx_bytes": sent,
            "h0_bulk_bytes": bulk_sent,
            "agent_cpu_share": cpu, "agent_main_cpu_share": main, "qos_cpu_share": qos_cpu,
            "qos_state": qos_state, "onset_at": onset_at,
            "steps": steps_done, "h0_split": split(sampler.samples, steps_done, rate_bps)}


def main_thread_cpu_s(pid: int) -> float:
    """A live process's main thread's CPU seconds so far: the agent's services run there, QoS's
    marking, pacing and telling among them; the probe engine, the pusher and the link watcher
    have threads of their own."""
    return cpu_s(pid, thread=pid)


def _await_steps(run: job.Job, n: int, timeout_s: float) -> None:
    """Until rank 0 has logged n steps (or the job ended: its result says how)."""
    deadline = time.monotonic() + timeout_s
    while sum("duration_s" in r for r in read_log(run.logs[0])) < n and run.running():
        if time.monotonic() > deadline:
            raise ClockfabricError(f"the DDP job did not reach step {n} in {timeout_s:.0f} s")
        time.sleep(0.2)


def reaction_s(steps: list[tuple[float, float]], onset_at: float, alone_s: float) -> tuple[float, int]:
    """From the onset to the end of the slowed steps (over SLOWED x alone_s) from the one running at
    the onset on, up to the first that is not (0: none), and how many were slowed."""
    ends = []
    for start, d in steps:
        if start + d <= onset_at:
            continue
        if d <= SLOWED * alone_s:
            break
        ends.append(start + d)
    return (ends[-1] - onset_at if ends else 0.0), len(ends)


def _qos_cpu_s(state_dir: Path) -> float:
    """The agents' QoS services' own CPU seconds so far, together (their state files)."""
    return sum(s.get("qos", {}).get("cpu_seconds", 0.0) for s in read_states(state_dir).values())


def fabric_runs(fabric: str, steps: int, rate: str, tmp: Path) -> dict:
    classes = TrafficClasses(collective_share=COLLECTIVE_SHARE) if fabric == "classes" else None
    name = f"qos-{fabric}-{os.getpid() % 10000}"
    with labs_removed(name):
        lab = build.up(replace(leafspine(len(HOSTS), 2, 1, host_rate=rate, name=f"qos-{fabric}"), classes=classes),
                       name)
        runs = {}
        plan = [("alone", False, False, None), ("without_qos", True, False, None), ("with_qos", True, True, None)]
        for label, bulk, qos, onset in plan + ([("onset", True, True, ONSET_STEP)] if fabric == "fifo" else []):
            runs[label] = one_run(lab, tmp / fabric / label, steps, parse_rate(rate), bulk=bulk, qos=qos,
                                  onset_step=onset)
            out.print(f"{fabric} {label}: {runs[label]['median_step_s'] * 1e3:.0f} ms/step, h0 sent "
                      f"{runs[label]['h0_tx_bytes'] * 8 / runs[label]['seconds'] / 1e6:.1f} Mbit/s, agents "
                      f"{runs[label]['agent_cpu_share']:.2%} of a core each")
    return runs


def paced_note(run: dict) -> str:
    """Which hosts' pacing held sockets in the run, how many and for how long (the agents' last state)."""
    held = {h: p for h, s in sorted(run["qos_state"].items()) if (p := s.get("pacing")) and p.get("sockets_ever")}
    return " (" + ", ".join(f"{h}: {p['sockets_ever']} sockets, limited {p['limited_s']:.0f} s"
                            for h, p in held.items()) + ")" if held else " (no socket was paced)"


def joining_note(run: dict) -> str:
    """The share of the QoS services' CPU spent finding new sockets between updates (over the agents' lives)."""
    states = run["qos_state"].values()
    total = sum(s.get("cpu_seconds", 0.0) for s in states)
    joining = sum((s.get("pacing") or {}).get("joining_cpu_seconds", 0.0) for s in states)
    return f"; {joining / total:.0%} of it finding new sockets between updates" if total and joining else ""


def onset_target(fabric: str, runs: dict) -> list[Target]:
    if "onset" not in runs:
        return []
    onset, alone_s = runs["onset"], runs["alone"]["median_step_s"]
    took, slowed = reaction_s(onset["steps"], onset["onset_at"], alone_s)
    joined = sum((s.get("pacing") or {}).get("joined_between_updates", 0) for s in onset["qos_state"].values())
    return [Target(f"{fabric}: reaction, the bulk job's onset to the DDP job's steps back within {SLOWED}x",
                   round(took, 2), 1.0, "s", better="lower",
                   note=f"bulk started after step {ONSET_STEP} (onset: its first data connection up); {slowed} "
                        f"step(s) in a row from it slower than "
                        f"{SLOWED}x alone ({alone_s * 1e3:.0f} ms); {joined} of its sockets paced before a "
                        "workload update listed them")]


def bulk_share_of_left(alone: dict, run: dict, rate_bps: int) -> tuple[float | None, str]:
    """The bulk job's bytes out of h0 over what the rest of h0's traffic (the DDP job, the agents)
    left of the link's capacity, all from the same run; and a note with the estimate that takes the
    DDP job's bytes from its alone run instead (the same model and steps, but not the same
    retransmissions, nor the same start-up)."""
    capacity = rate_bps / 8 * run["seconds"]
    rest = run["h0_tx_bytes"] - run["h0_bulk_bytes"]
    share = run["h0_bulk_bytes"] / (capacity - rest) if capacity > rest else None
    from_alone = (run["h0_tx_bytes"] - alone["h0_tx_bytes"]) / (capacity - alone["h0_tx_bytes"])
    mb = f"{run['h0_bulk_bytes'] / 1e6:.0f} of {run['h0_tx_bytes'] / 1e6:.0f} MB over {run['seconds']:.0f} s"
    return share, (f"the bulk job's bytes from its sockets (tcp_info), h0's from its NIC, in one run: {mb}; "
                   f"with the DDP job's bytes from its alone run instead, {from_alone:.3f}")


def cpu_note(with_qos: dict, without: dict) -> str:
    """Where the agents' CPU with QoS less without went: the main thread, where the services run
    (QoS's own work among them), and the others (the probe engine, the pusher, the link watcher),
    which run no QoS code: what these gain is the traffic's, not the control's."""
    main = with_qos["agent_main_cpu_share"] - without["agent_main_cpu_share"]
    rest = with_qos["agent_cpu_share"] - without["agent_cpu_share"] - main
    return (f"with QoS each agent {with_qos['agent_cpu_share']:.2%} of a core, without {without['agent_cpu_share']:.2%}"
            f"; the difference in the main thread (the services, QoS's own work among them) {main:+.2%}, in the "
            f"threads that run no QoS code {rest:+.2%}")


def fabric_targets(fabric: str, runs: dict, rate_bps: int) -> list[Target]:
    alone, without, with_qos = runs["alone"], runs["without_qos"], runs["with_qos"]
    slow_without = without["median_step_s"] / alone["median_step_s"]
    slow_with = with_qos["median_step_s"] / alone["median_step_s"]
    bulk_share, share_note = bulk_share_of_left(alone, with_qos, rate_bps)
    share_note += split_note(with_qos.get("h0_split"))
    alone_ms = f"alone {alone['median_step_s'] * 1e3:.0f} ms/step"
    return [
        Target(f"{fabric}: DDP slowdown beside the bulk job, without QoS (the scenario's contention)",
               round(slow_without, 3), 1.3, "x", note=alone_ms),
        Target(f"{fabric}: DDP slowdown beside the bulk job, with QoS", round(slow_with, 3), 1.05, "x",
               better="lower", baseline=round(slow_without, 3),
               note=f"{alone_ms}; baseline: without QoS" + PACED_NOTE[fabric] + paced_note(with_qos)),
        Target(f"{fabric}: bulk job's share of the link capacity the DDP job left (h0)",
               None if bulk_share is None else round(bulk_share, 3), 0.8, "", note=share_note),
        Target(f"{fabric}: agent CPU with QoS less without", round(with_qos["agent_cpu_share"]
                                                                   - without["agent_cpu_share"], 4), 0.01, "core",
               better="lower", note=cpu_note(with_qos, without)),
        Target(f"{fabric}: the agents' QoS service's own CPU", round(with_qos.get("qos_cpu_share", 0.0), 4), 0.01,
               "core", better="lower", note="marking, pacing and telling, timed in the service (thread CPU)"
               + joining_note(with_qos)),
        *onset_target(fabric, runs),
    ]


@BENCHMARKS.register("qos")
def main(fabrics: list[str] = typer.Option(["classes", "fifo"], "--fabric", help="classes and/or fifo."),
         steps: int = typer.Option(30, min=5, help="Training steps per DDP run."),
         rate: str = typer.Option("50mbit", help="Every link's rate."),
         out_file: Path = typer.Option(RESULTS / "qos.json", "--out", help="Where the record goes."),
         as_json: bool = typer.Option(False, "--json", help="Print the record's report as JSON.")) -> None:
    """A critical DDP job beside a scavenger bulk job: step time with and without QoS."""
    require_root()
    if bad := [f for f in fabrics if f not in ("classes", "fifo")]:
        raise ClockfabricError(f"--fabric {bad[0]!r}: give classes or fifo")
    if not SCRIPT.is_file():
        raise ClockfabricError(f"run from the repository root: {SCRIPT} is not here")
    facts = machine()
    report: dict = {"steps": steps, "rate": rate, "seed": SEED, "collective_share": COLLECTIVE_SHARE, "fabrics": {}}
    targets: list[Target] = []
    with tempfile.TemporaryDirectory(prefix="qos-bench-") as tmp:
        for fabric in fabrics:
            runs = fabric_runs(fabric, steps, rate, Path(tmp))
            report["fabrics"][fabric] = runs
            targets += fabric_targets(fabric, runs, parse_rate(rate))
    path = record("qos", targets, facts, report, path=out_file)
    if as_json:
        print_json(report)
        return
    out.print(targets_table("QoS: a critical DDP job beside a scavenger bulk job", targets))
    out.print(f"record: {path}")
