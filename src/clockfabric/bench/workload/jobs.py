"""Jobs and faults on a lab, as `bench workload` and the lab's story tests make them: TCP flows
started with `clockfabric job run` (or as no job), pinned on a spine by their source port,
marking a DSCP, paced or saturating; and the controller's verdict on a job."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from clockfabric.controller.client import api
from clockfabric.controller.on_lab import LabFleet
from clockfabric.errors import ClockfabricError
from clockfabric.lab import netns
from clockfabric.lab.state import Lab
from clockfabric.probe.paths import spread
from clockfabric.topology import TrafficClasses, interfaces, leafspine

PACED: dict = {"chunk": 4096, "pause_s": 0.005}  # ~6 Mbit/s in small bursts: alone, a flow queues nowhere
COLLECTIVE = 26
FABRIC_BPS = 20_000_000

RECEIVER = """
import socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", int(sys.argv[1]))); srv.listen()
conn, _ = srv.accept()
while conn.recv(1 << 16):
    pass
"""
# argv: address, port, source address, source port (0: any), chunk bytes, pause s, DSCP. CUBIC, named:
# a namespace takes the machine's default, and BBR (this machine's) keeps the FIFOs the faults need short.
# Once connected it logs "sending <time_ns>": when its traffic starts (`sending_since`).

SENDER = """
import socket, sys, time
address, port, source, sport, chunk, pause, dscp = sys.argv[1:8]
for _ in range(150):
    try:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, int(dscp) << 2)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"cubic")
        s.bind((source, int(sport)))
        s.connect((address, int(port)))
        break
    except OSError:
        s.close()
        time.sleep(0.2)
data, pause = b"x" * int(chunk), float(pause)
print("sending", time.time_ns(), flush=True)
while True:
    s.sendall(data)
    if pause:
        time.sleep(pause)
"""


def address(lab: Lab, host: str) -> str:
    return str(lab.topology.hosts[host].address)


def port_on(lab: Lab, src: str, dst: str, port: int, spine: str, *, seed: int = 7) -> int:
    """A source port whose src -> dst:port TCP flows the fabric hashes onto `spine` (traced from src)."""
    on_spine = {str(i.address.ip) for p, i in interfaces(lab.topology).items() if p.node == spine}
    with netns.entered(lab.ns(src)):
        ports = [p.sport for p in spread(address(lab, src), address(lab, dst), port, want=8, seed=seed)
                 if p.hop in on_spine]
    if not ports:
        raise ClockfabricError(f"no source port from {src} to {dst} was found on {spine}")
    return ports[0]


def flow(lab: Lab, logs: Path, jobid: str | None, src: str, dst: str, port: int, *, spine: str | None = None,
         chunk: int = 65536, pause_s: float = 0.0, dscp: int = 0) -> list[subprocess.Popen]:
    """A TCP flow src -> dst:port (its receiver first), as job `jobid` (None: as no job), pinned on
    `spine` where given; the sender writes `chunk` bytes then sleeps `pause_s`, marking `dscp`."""
    sport = port_on(lab, src, dst, port, spine) if spine else 0
    job = [sys.executable, "-m", "clockfabric.cli", "job", "run", "--name", jobid, "--"] if jobid else []
    name = f"{jobid or 'nojob'}-{src}-{dst}-{port}"
    procs = [lab.spawn(dst, [*job, sys.executable, "-c", RECEIVER, str(port)], f"{name} receiver",
                       log=logs / f"{name}-receiver.log")]
    try:
        procs.append(lab.spawn(src, [*job, sys.executable, "-c", SENDER, address(lab, dst), str(port),
                                     address(lab, src), str(sport), str(chunk), str(pause_s), str(dscp)],
                               f"{name} sender", log=sender_log(logs, jobid, src, dst, port)))
    except BaseException:
        from clockfabric.lab.process import stop

        stop(procs)
        raise
    return procs


def sender_log(logs: Path, jobid: str | None, src: str, dst: str, port: int) -> Path:
    """Where `flow`'s sender logs."""
    return logs / f"{jobid or 'nojob'}-{src}-{dst}-{port}-sender.log"


def sending_since(log: Path, timeout_s: float = 30.0) -> int:
    """When the sender logging to `log` connected and began to send (time.time_ns), waiting for it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines() if log.exists() else []:
            if line.startswith("sending "):
                return int(line.split()[1])
        time.sleep(0.05)
    raise ClockfabricError(f"the sender logging to {log} did not start sending in {timeout_s:.0f} s")


def why(fleet: LabFleet, jobid: str, since: str = "60s") -> dict | None:
    """The controller's verdict on the job now; None while it does not know the job."""
    try:
        return api(fleet.lab, fleet.url, fleet.token_file, f"/api/v1/jobs/{jobid}/why", since=since)
    except ClockfabricError:  # 404 until the job's processes are pushed
        return None


def known(fleet: LabFleet, jobid: str, flows: int, timeout_s: float = 90.0) -> dict:
    """Wait until the controller judges `flows` flows of the job healthy, each with its traced
    path (4 links: host, leaf, spine, leaf, host) and its in-band delay: a loaded machine's
    agents may push a new flow's readings seconds late, and a fault injected before would be
    judged on nothing."""
    deadline = time.monotonic() + timeout_s
    w: dict = {}
    while time.monotonic() < deadline:
        w = why(fleet, jobid, "10s") or {}
        rows = w.get("flows", [])
        if w.get("verdict") == "healthy" and len(rows) == flows and all(
                len(r.get("links") or []) == 4 and r.get("delay_source") == "inband" for r in rows):
            return w
        time.sleep(1.0)
    raise ClockfabricError(f"job {jobid}'s {flows} flows were not all judged healthy, traced and measured in-band "
                           f"in {timeout_s:.0f} s; last verdict: {w.get('verdict')}, flows: {w.get('flows')}")


def links_between(lab: Lab, a: str, b: str) -> set[str]:
    """The names of the links cabling node a to node b."""
    return {lk.name for lk in lab.topology.links if {lk.a.node, lk.b.node} == {a, b}}


def alerts(fleet: LabFleet, kind: str, since_ns: int) -> list[dict]:
    """The controller's alerts of `kind` opened since `since_ns`."""
    found = api(fleet.lab, fleet.url, fleet.token_file, "/api/v1/alerts", since_ns=since_ns, limit=1000)
    return [a for a in found.get("items", []) if a.get("kind") == kind]


def senders(procs: list[subprocess.Popen]) -> list[int]:
    """The pids doing a flow's sending: the children of its `job run` wrappers (or the wrapper
    itself for a flow of no job), to stop and continue as a busy host would."""
    from clockfabric.lab.process import children

    return [kid for p in procs for kid in (children(p.pid) or [p.pid])]


@dataclasses.dataclass
class TwoJobs:
    """A lab with agents, a controller and jobs A and B running (see `two_jobs`)."""

    fleet: LabFleet
    procs: list[subprocess.Popen]
    straggler: list[subprocess.Popen]  # A's h2 -> h1 flow: its receiver, then its sender


@contextmanager
def two_jobs(name: str, settle_s: float) -> Iterator[TwoJobs]:
    """Lab `name` (leaf-spine, 4 hosts, 2 spines, 20 Mbit/s fabric links, traffic classes), its
    agents and controller, and two jobs marking the collective class: A with three paced flows
    (h0 -> h2 on spine1, h0 -> h3 and h2 -> h1 on spine0), B with one (h1 -> h3 on spine0);
    yielded `settle_s` + 5 s after they start, and all of it stopped and removed on the way out."""
    from clockfabric.bench.harness import labs_removed
    from clockfabric.lab import build
    from clockfabric.lab.process import stop

    topo = dataclasses.replace(leafspine(4, 2, 2, host_rate="100mbit", fabric_rate=f"{FABRIC_BPS // 10**6}mbit"),
                               classes=TrafficClasses())
    with labs_removed(name):
        build.down(name)
        lab = build.up(topo, name)
        fleet = LabFleet(lab, peers=3)
        fleet.start()
        procs: list[subprocess.Popen] = []
        try:
            fleet.wait_pushing()
            logs = fleet.logs
            procs += flow(lab, logs, "A", "h0", "h2", 5401, spine="spine1", dscp=COLLECTIVE, **PACED)
            procs += flow(lab, logs, "A", "h0", "h3", 5402, spine="spine0", dscp=COLLECTIVE, **PACED)
            straggler = flow(lab, logs, "A", "h2", "h1", 5403, spine="spine0", dscp=COLLECTIVE, **PACED)
            procs += straggler
            procs += flow(lab, logs, "B", "h1", "h3", 5404, spine="spine0", dscp=COLLECTIVE, chunk=4096, pause_s=0.01)
            time.sleep(settle_s + 5)  # rates, paths and in-band delays for every flow
            known(fleet, "A", flows=3)
            yield TwoJobs(fleet, procs, straggler)
        finally:
            stop(procs, grace_s=2.0)
            fleet.stop()
