"""`clockfabric bench clocksync`: the load its scenarios put on the lab (UDP and TCP flows, started and
stopped through `clockfabric lab traffic`), and the helpers that run the CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from clockfabric.bench.clocksync.watch import Fabric
from clockfabric.console import err
from clockfabric.lab import build, job
from clockfabric.lab.process import alive, children
from clockfabric.lab.state import Lab, lab_names
from clockfabric.topology import format_rate

CLI = [sys.executable, "-m", "clockfabric.cli"]


UDP_SHARE = 0.8


TCP_CC = "reno"  # loss-based; set in the TCP senders' namespaces (cubic is not allowed there)
TCP_SCENARIOS = ("C", "C+", "P", "R", "R0", "L2")


RAMP_TIMEOUT_S = 25.0


DDP_SCRIPT = Path("examples/ddp_train.py")
# the example job's smallest model: 2 layers of 128, some 50k parameters, a 0.2 MB all-reduce
# a step, bursty against its compute; many steps, stopped once sync is done
DDP_ARGS = ["--width", "128", "--depth", "2", "--steps", "100000", "--timeout", "300"]
JOB_READY_TIMEOUT_S = 180.0  # 8 ranks importing torch on 2 cores


class BenchError(Exception):
    pass


def cli(*args: str, timeout: float = 120) -> str:
    p = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise BenchError(f"`clockfabric {' '.join(args)}` failed: {(p.stderr or p.stdout).strip()[-500:]}")
    return p.stdout


# ---- traffic ---------------------------------------------------------------------------------
def loaded_hosts(fab: Fabric, scenario: str) -> list[str]:
    """The hosts whose own link a scenario slows and saturates both ways: the reference (R, R0),
    or the second host of each of the first two leaves (L2: two at once, neither the reference)."""
    if scenario in ("R", "R0"):
        return [fab.reference]
    if scenario == "L2":
        return [leaf[1] for leaf in list(fab.leaves.values())[:2]]
    return []


def flows_for(fab: Fabric, scenario: str) -> list[tuple[str, str]]:
    leaves = list(fab.leaves.values())
    n = len(leaves)
    if scenario == "B":  # 2 leaves: each sends one flow to the other; 4: leaf 0 -> 1 and 2 -> 3
        pairs = [(0, 1), (1, 0)] if n == 2 else [(2 * j, 2 * j + 1) for j in range(n // 2)]
        return [(leaves[i][1], leaves[j][2]) for i, j in pairs]
    if scenario == "C":  # each flow crosses two spine links (up, down): a quarter as many flows
        spine_links = sum(1 for i in range(len(fab.topo.links)) if fab.is_fabric(i))
        per_leaf = len(leaves[0])
        return [(leaves[k % n][1 + k // n], leaves[(k + 1) % n][per_leaf - 1 - k // n])
                for k in range(max(1, spine_links // 4))]
    if scenario in ("R", "R0"):  # the reference sends to one host on the next leaf and receives from another
        ref = fab.reference
        home = next(i for i, leaf in enumerate(leaves) if ref in leaf)
        far = leaves[(home + 1) % n]
        return [(ref, far[0]), (far[-1], ref)]
    if scenario == "L2":  # each loaded host sends to and receives from one partner on the next leaf
        busy = {fab.reference, *loaded_hosts(fab, scenario)}
        flows = []
        for h in loaded_hosts(fab, scenario):
            home = next(i for i, leaf in enumerate(leaves) if h in leaf)
            partner = next(x for x in leaves[(home + 1) % n] if x not in busy)
            flows += [(h, partner), (partner, h)]
        return flows
    if scenario in ("C+", "P"):  # every host: one flow to the next leaf, one within its leaf
        flows = []
        for i, leaf in enumerate(leaves):
            for j, h in enumerate(leaf):
                flows.append((h, leaves[(i + 1) % n][j]))
                flows.append((h, leaf[(j + 1) % len(leaf)]))
        return flows
    return []


def start_traffic(fab: Fabric, scenario: str, seconds: float) -> list[dict]:
    flows = flows_for(fab, scenario)
    if scenario in TCP_SCENARIOS:  # loss-based TCP fills the port buffers; this machine defaults to BBR
        for src in sorted({a for a, _ in flows}):
            subprocess.run(["ip", "netns", "exec", fab.lab.ns(src), "sysctl", "-qw",
                            f"net.ipv4.tcp_congestion_control={TCP_CC}"], check=True, capture_output=True)
    extra = ["--udp", format_rate(round(UDP_SHARE * fab.host_rate))] if scenario == "B" else []
    procs = [subprocess.Popen([*CLI, "lab", "traffic", a, b, "--seconds", f"{seconds:.0f}", *extra,
                               "--background", "--lab", fab.lab.name],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for a, b in flows]
    for p in procs:
        _, e = p.communicate(timeout=120)
        if p.returncode != 0:
            raise BenchError(f"lab traffic failed: {e.strip()[-300:]}")
    return [{"src": a, "dst": b, "protocol": "udp" if extra else "tcp",
             "rate_bps": round(UDP_SHARE * fab.host_rate) if extra else None,
             "congestion_control": None if extra else TCP_CC} for a, b in flows]


def wait_flowing(fab: Fabric, flows: list[dict], stage) -> float:
    """Until every sending host's uplink moves at least 20% of the slowest link's rate (iperf3 is up)."""
    t0 = time.monotonic()
    senders = {f["src"] for f in flows}
    floor = 0.2 * min(fab.rates.values())
    prev = fab.tc()
    prev_t = time.monotonic()
    while time.monotonic() - t0 < RAMP_TIMEOUT_S:
        time.sleep(1.0)
        now, now_t = fab.tc(), time.monotonic()
        idle = [h for h in senders
                if (now[(h, "eth0")]["bytes"] - prev[(h, "eth0")]["bytes"]) * 8 / (now_t - prev_t) < floor]
        stage(f"waiting for iperf3 to flow ({len(senders) - len(idle)}/{len(senders)} senders)")
        if not idle:
            return time.monotonic() - t0
        prev, prev_t = now, now_t
    raise BenchError(f"traffic did not start within {RAMP_TIMEOUT_S:.0f} s on {', '.join(sorted(idle)[:4])}")


def start_job(fab: Fabric, log_dir: Path, stage) -> tuple[job.Job, float]:
    """The example DDP job, one rank on every host; returns once every rank is stepping."""
    j = job.start(fab.lab, fab.hosts, [str(DDP_SCRIPT), *DDP_ARGS], log_dir)
    t0 = time.monotonic()
    while time.monotonic() - t0 < JOB_READY_TIMEOUT_S:
        if not j.running():
            raise BenchError(f"the DDP job ended before it ran: {j.result().error or 'no error logged'}")
        stepping = sum(any("step" in r for r in job.read_log(p)) for p in j.logs)
        stage(f"waiting for the DDP job ({stepping}/{len(j.logs)} ranks stepping)")
        if stepping == len(j.logs):
            return j, time.monotonic() - t0
        time.sleep(1.0)
    j.stop()
    raise BenchError(f"the DDP job did not start stepping within {JOB_READY_TIMEOUT_S:.0f} s")


def job_summary(j: job.Job) -> dict:
    """How the job ran while sync did: steps, the median step, and its outcome once stopped."""
    j.stop()
    r = j.result()
    return {"script": str(DDP_SCRIPT), "args": DDP_ARGS, "ranks": r.ranks, "steps": r.steps,
            "median_step_s": r.median_step_s, "outcome": "stopped after sync" if j.killed else r.outcome,
            "error": r.error}


def stop_traffic(lab: Lab) -> None:
    """The background `lab traffic` processes this benchmark started: iperf3 first, then them."""
    procs = [r for r in lab.processes() if r["what"].startswith("traffic ")]
    for rec in procs:
        for kid in children(rec["pid"]):
            try:
                os.kill(kid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5
    for sig in (signal.SIGTERM, signal.SIGKILL):
        while any(alive(r["pid"]) for r in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        for rec in procs:
            if alive(rec["pid"]):
                try:
                    os.kill(rec["pid"], sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 3


def cleanup(names: list[str]) -> list[str]:
    for n in names:
        try:
            subprocess.run([*CLI, "lab", "down", n], capture_output=True, timeout=120)
        except Exception as e:  # noqa: BLE001 - keep cleaning
            err.print(f"cleanup: lab down {n}: {e}")
        if n in lab_names():
            build.down(n)
    return [n for n in names if n in lab_names()]


def leftovers(names: list[str]) -> list[str]:
    """Processes whose command line still names one of our labs."""
    left = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            argv = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(f"--lab {n}" in argv or f"/labs/{n}/" in argv for n in names):
            left.append(f"{p.name}: {argv[:100]}")
    return left
