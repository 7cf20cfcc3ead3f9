"""One scenario of `bench clocksync` (command.py runs them, one lab a size): its load or event,
one `clockfabric sync --json` across it, and what the benchmark's own watcher saw.

  A  idle         no traffic.
  B  udp80        one-direction UDP at 80% of the host link rate between leaves (8 hosts:
                  leaf0 -> leaf1 and leaf1 -> leaf0; 32 hosts: leaf0 -> leaf1, leaf2 -> leaf3:
                  two flows, what 2 cores forward beside 32 agents), no link direction
                  carries two flows: every loaded link runs at 80%, wherever ECMP puts them.
  C  tcp-spine    every leaf-spine link slowed to 25 Mbit/s (`lab rate`; host links stay at
                  200), then one-direction saturating TCP (iperf3) flows between leaves, one
                  per four spine links (each flow crosses two: up to its spine, down to the
                  other leaf), so at most half the spine links carry a flow: the spine link
                  is each flow's bottleneck, a standing queue builds at the leaf's uplink,
                  and host links carry 12%. The sending hosts use Reno: this machine
                  defaults to BBR, which keeps queues short, and CUBIC is not in
                  tcp_allowed_congestion_control inside a namespace; loss-based Reno fills
                  the 200-packet buffers as the design's measurement did.
                  ECMP places the flows: the links that really held a queue are measured
                  (tc counters and queue lengths looked at every 4 s) and reported.
  C+ tcp-all      the honest limit (8 hosts): every link at 25 Mbit/s, each host sends one
                  Reno flow to another leaf and one within its leaf, so every host link
                  direction holds a standing queue and the spine links carry the cross-leaf
                  half (how many of them queue depends on ECMP; measured and reported).
                  Targets are reported, not expected.
  R  ref-loaded   the loaded host is the reference: its host link slowed to 25 Mbit/s (the
                  rest stay at 200); once all hosts are within 1 µs (and 3 s more), one Reno
                  flow from it to a host on the next leaf and one back from another there, so
                  both directions of its link hold a standing queue (a job starting on a
                  synced fleet). Judged from the load's start: the quiet hosts (in no flow),
                  and how soon the reference's agent says it is not synced (its mapping's
                  state), as `sync` names such hosts.
  P  prio-all     C+'s load (every link at 25 Mbit/s, two Reno flows from every host) on a
                  second lab built with traffic classes (`topology generate --classes`):
                  probes and ptp4l both mark DSCP 46 (EF) and ride the strict-priority class,
                  iperf3's DSCP 0 is best-effort. The same load as C+, the fabric differing.
  J  ddp-job      the lab's example DDP job (examples/ddp_train.py, PyTorch over gloo, its
                  smallest model) with one rank on every host, at the host rate: a ring
                  all-reduce every step, bursts between compute. Sync starts once every rank
                  steps; the job's steps and median step during sync are reported.
  D  step         idle; once all hosts are within 1 µs (and 3 s more), the last host by name
                  (not the reference) has its clock stepped by +1 ms (`lab clock step`);
                  re-convergence is the time from the step until that host's |error| is
                  back under 1 µs and stays there for 2 s, timed by when its agent
                  published each state (the watcher's own look, later by up to a sample
                  period and more on a loaded machine, is reported beside it).

The fault scenarios (R0 ref-loaded-first, K ref-killed, L2 two-loaded, S hand-step, F fast-clock)
and --repeats N are described in faults.py.

Beside `sync`, this benchmark watches the agents itself (every 0.5 s): their state files
(first publish, counters) and /proc/<pid>/stat (CPU), and each host's error against the
truth with clockfabric.clock.evaluate.ours_errors, as `sync`'s own Sampler does. That gives
"agents up" (every agent has published once: Python start-up of N agents on 2 cores), the
convergence time after that, CPU per agent once converged, probe bytes per host once
converged (wire + control), and the step's re-convergence.

Each sync runs for a start-up allowance (8 s + 1 s per host, x2 under load) plus --seconds
(+14 s for the step), since `sync` counts its time from before the agents start.

Every scenario also reports its bound's coverage: the share of samples after convergence in
which each host's published bound held its |error| against the truth (`sync --json`'s "bound").
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from rich.progress import Progress

from clockfabric.bench.clocksync import faults
from clockfabric.bench.clocksync.report import PEERS, STEP, WINDOW_S, quiet_hosts
from clockfabric.bench.clocksync.traffic import (
    CLI,
    UDP_SHARE,
    BenchError,
    flows_for,
    job_summary,
    loaded_hosts,
    start_job,
    start_traffic,
    stop_traffic,
    wait_flowing,
)
from clockfabric.bench.clocksync.watch import Fabric, Watch, cpu_busy, cpu_pressure
from clockfabric.topology import format_rate, parse_rate

HOST_RATE = "200mbit"
SPINE_RATE_C = "25mbit"  # scenario C: the spine link is the bottleneck, host links stay at 200
ALL_RATE = "25mbit"  # scenarios C+ and P: every link, so 2 cores can keep all of them saturated
LOADED_REF_RATE = "25mbit"  # scenario R: the reference's host link
SAMPLE_S, QUEUE_LOOK_S = 0.5, 4.0  # the watcher's period; queue lengths looked at this often
STEP_AFTER_CONVERGED_S = 3.0
STEP_TAIL_S = 14.0  # sync time kept after the step
STARTUP_S, STARTUP_PER_HOST_S, LOADED_STARTUP_FACTOR = 8.0, 1.0, 2.0  # sync time allowed for agents to start

SCENARIOS = {
    "A": ("idle", "no traffic"),
    "B": ("udp80", f"UDP at {UDP_SHARE:.0%} of link rate, one direction, 2 flows across leaves"),
    "D": ("step", f"idle, one host's clock stepped by +{STEP}"),
    "C": ("tcp-spine", f"saturating TCP on up to half the spine links (leaf-spine at {SPINE_RATE_C})"),
    "C+": ("tcp-all", f"every host link saturated by TCP (all links at {ALL_RATE}): the honest limit"),
    "R": ("ref-loaded", f"the reference's link at {LOADED_REF_RATE}, saturated both ways by TCP"),
    "P": ("prio-all", "C+'s load on a fabric with traffic classes, probes and ptp4l in the priority class"),
    "J": ("ddp-job", "the example DDP job (smallest model), one rank on every host"),
    **faults.SCENARIOS,
}
ORDER = ["A", "B", "D", "J", "R", *faults.ORDER, "C", "C+", "P"]  # C and C+ change link rates, so they come late
PRIORITIZED = {"P"}  # run on the lab built with traffic classes
LOADED = {"B", "C", "C+", "R", "P", "J", "R0", "L2"}
LOAD_LATE = {"R", "L2"}  # the load starts once every host is within 1 µs (+3 s), as D's step does
EVERY_HOST_LOADED = {"C+", "P", "J"}  # only at --all-saturated-sizes: what 2 cores carry at 8 hosts


# ---- one scenario ----------------------------------------------------------------------------
def run_scenario(fab: Fabric, key: str, seconds: float, startup_s: float, bar: Progress, stage_id) -> dict:
    name, what = SCENARIOS[key]
    hosts = len(fab.hosts)

    def stage(text: str) -> None:
        bar.update(stage_id, description=f"{hosts:>2} hosts, {key} {name}: {text}")

    res: dict = {"scenario": key, "name": name, "what": what, "hosts": hosts}
    if restored := faults.restore_rates(fab):
        stage(f"{', '.join(restored)}'s clock back at its own rate")
    if key == "C":
        stage(f"leaf-spine links to {SPINE_RATE_C}")
        fab.set_rates(parse_rate(SPINE_RATE_C), fabric_only=True)
    if key in faults.HOST_LOADED:
        stage(f"{', '.join(loaded_hosts(fab, key))}'s link to {LOADED_REF_RATE}")
        fab.set_rates(parse_rate(HOST_RATE), fabric_only=False)
        for h in loaded_hosts(fab, key):
            fab.set_host_rate(h, parse_rate(LOADED_REF_RATE))
    if key in ("C+", "P"):
        stage(f"every link to {ALL_RATE}")
        fab.set_rates(parse_rate(ALL_RATE), fabric_only=False)
    res["rates"] = {"host_link": format_rate(max(r for i, r in fab.rates.items() if not fab.is_fabric(i))),
                    "slowest_link": format_rate(min(fab.rates.values())),
                    "fabric_link": format_rate(max(r for i, r in fab.rates.items() if fab.is_fabric(i)))}
    loaded = key in LOADED - LOAD_LATE
    settle_s = faults.settle_s(key, STEP_AFTER_CONVERGED_S)  # from convergence to the event
    tail_s = STEP_TAIL_S + settle_s - STEP_AFTER_CONVERGED_S if key in ("D", *LOAD_LATE, *faults.EVENTS) else 0.0
    # Python start-up of N agents on 2 cores takes longer while the lab forwards traffic
    sync_s = startup_s * (LOADED_STARTUP_FACTOR if loaded else 1.0) + seconds + tail_s
    res["sync_seconds"] = sync_s
    flows, ddp, load_at = [], None, None
    if key == "J":
        ddp, res["job_ready_s"] = start_job(fab, fab.lab.dir / "bench-ddp", stage)
    elif loaded:
        stage(f"starting {len(flows_for(fab, key))} iperf3 flows")
        flows = start_traffic(fab, key, sync_s + 60)  # stopped explicitly once sync is done
        res["ramp_s"] = wait_flowing(fab, flows, stage)

    for f in (fab.lab.dir / "agents").glob("*.json"):  # never read the last scenario's states
        f.unlink()
    busy0, load0 = cpu_busy(), Path("/proc/loadavg").read_text().split()[:3]
    tc0 = (time.monotonic(), fab.tc())
    looks: list[dict] = []  # queue lengths, every QUEUE_LOOK_S from 30% to 90% of the run
    sync_out = fab.lab.dir / f"bench-sync-{key.replace('+', 'plus')}.json"
    sync_err = sync_out.with_suffix(".err")
    t_launch = time.monotonic()
    with open(sync_out, "w") as so, open(sync_err, "w") as se:
        proc = subprocess.Popen([*CLI, "sync", "--lab", fab.lab.name, "--seconds", f"{sync_s:.0f}s",
                                 "--peers", str(PEERS), "--window", str(WINDOW_S), "--json", *faults.sync_args(key)],
                                stdout=so, stderr=se)
    watch = Watch(fab, t_launch)
    step = stepper = fault = None
    last_look = 0.0
    step_host = fab.hosts[-1]
    try:
        while proc.poll() is None:
            time.sleep(SAMPLE_S)
            watch.sample()
            t = time.monotonic() - t_launch
            if 0.3 * sync_s <= t <= 0.9 * sync_s and t >= last_look + QUEUE_LOOK_S:
                looks.append(fab.tc())
                last_look = t
            due = (watch.converged_s is not None and t >= watch.converged_s + settle_s
                   or t >= sync_s - STEP_TAIL_S + 2)
            if key in LOAD_LATE and load_at is None and due:
                res["load_began_s"] = t  # starting 4-8 iperf3 pairs takes seconds, unsampled, on 32 hosts
                flows = start_traffic(fab, key, sync_s + 60)
                load_at = time.monotonic() - t_launch
            if key in faults.EVENTS and fault is None and due:
                fault = faults.fire(fab, key, t)
            if key == "D" and stepper is None and due:
                before = len(fab.lab.clocks()[step_host].steps)
                stepper = subprocess.Popen([*CLI, "lab", "clock", "step", step_host, STEP, "--lab", fab.lab.name],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if stepper is not None and step is None and stepper.poll() is not None:
                steps = fab.lab.clocks()[step_host].steps
                if stepper.returncode != 0 or len(steps) <= before:
                    why = stepper.stderr.read().decode().strip() if stepper.stderr else ""
                    raise BenchError(f"lab clock step failed: {why}")
                step = steps[-1][0]
            stepped = ", stepped" if step else ", loaded" if load_at else f", {fault['what']}" if fault else ""
            stage(f"sync {t:4.0f}/{sync_s:.0f} s, {watch.status(hosts)}{stepped}")
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)
        if ddp is not None:
            res["job"] = job_summary(ddp)
    tc1 = (time.monotonic(), fab.tc())
    busy1, load1 = cpu_busy(), Path("/proc/loadavg").read_text().split()[:3]
    if flows:
        stage("stopping traffic")
        stop_traffic(fab.lab)
    if proc.returncode != 0:
        raise BenchError(f"sync failed ({key} {name}, {hosts} hosts): {sync_err.read_text().strip()[-600:]}")
    report = json.loads(sync_out.read_text())

    m = report["methods"]
    ours = m["clockfabric"]["p99_ns"]
    res["methods"] = m
    res["ratio_p99"] = {b: (m[b]["p99_ns"] / ours if ours and m[b].get("p99_ns") else None)
                        for b in ("ntp_min_rtt", "ptp4l")}
    res["sync"] = {k: report.get(k) for k in ("converged_s", "stats_from_s", "probe_bytes_per_host_per_s",
                                              "reference", "timestamping", "scenario")}
    res["sync"]["stats_window_s"] = sync_s - report["stats_from_s"] if report.get("stats_from_s") else None
    res["per_host"] = report.get("hosts")
    res["bound"] = report.get("bound")
    res["unsynced"] = report.get("unsynced")
    res["flows"], res["load_at_s"] = flows, load_at
    if load_at is not None:  # judged from the moment the load starts
        busy_hosts = {h for f in flows for h in (f["src"], f["dst"])} | {fab.reference}
        res["quiet_hosts"] = quiet_hosts(watch.errors, load_at, busy_hosts)
        res["reference_named"] = watch.named_after(fab.reference, load_at)
    faults.judge(res, watch, fab, key, load_at, fault)
    res["timeline"] = report.get("timeline")
    res["agents_up_s"] = watch.agents_up_s
    res["converged_watch_s"] = watch.converged_s
    res["converged_after_up_s"] = (watch.converged_s - watch.agents_up_s
                                   if watch.converged_s is not None and watch.agents_up_s is not None else None)
    res["cpu"] = watch.cpu_pct()
    res["probes"] = watch.probe_shares(parse_rate(HOST_RATE), report.get("probe_bytes_per_host_per_s"))
    res["links"] = fab.link_load(tc0, looks, tc1)
    res["links"]["queue_looks"] = len(looks)
    if key in faults.HOST_LOADED:  # later scenarios expect every host link at the host rate
        fab.set_rates(parse_rate(HOST_RATE), fabric_only=False)
    res["machine_load"] = {"loadavg_start": load0, "loadavg_end": load1,
                           "cpu_busy_pct": 100.0 * (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]),
                           "cpu_pressure_some_avg60_pct": cpu_pressure()}
    if key == "D":
        if step is None:
            res["step"] = {"host": step_host, "size": STEP, "at_s": None, "reconverged_s": None,
                           "note": "the step never happened (sync ended first)"}
        else:
            t_step = None
            for t, real, _, _ in watch.errors:
                if real >= step:
                    t_step = t
                    break
            res["step"] = {"host": step_host, "size": STEP, "at_s": t_step,
                           **watch.reconvergence(step_host, step)}
    return res
