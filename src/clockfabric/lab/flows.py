"""Traffic that lab tests and benchmarks start between lab hosts: TCP flows (as a job, started
with `clockfabric job run`, or as no job; paced or saturating; marking a DSCP) and iperf3 flows,
each pinned on a spine where asked, by its source port.

Which source port the fabric hashes onto which spine is learned by probing (probe.paths.spread);
the lab imports no service, so a caller that pins a flow hands `spread` in."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from clockfabric.errors import ClockfabricError
from clockfabric.lab import netns
from clockfabric.lab.exec import command
from clockfabric.lab.state import Lab
from clockfabric.lab.traffic import iperf_server
from clockfabric.topology import Port, Topology, interfaces

PACED: dict = {"chunk": 4096, "pause_s": 0.005}  # ~6 Mbit/s in small bursts: alone, a flow queues nowhere
IPERF_PORT = 5400

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


class Traced(Protocol):
    """A source port and the hop it was traced to (probe.paths.Path)."""

    @property
    def sport(self) -> int: ...

    @property
    def hop(self) -> str | None: ...


class Spread(Protocol):
    """probe.paths.spread: `want` source ports from src to dst:dport, spread over the hops they take."""

    def __call__(self, src: str, dst: str, dport: int, *, want: int, seed: int = ...) -> Sequence[Traced]: ...


def address(lab: Lab, host: str) -> str:
    """The host's stable address."""
    return str(lab.topology.hosts[host].address)


def nic_address(topo: Topology, host: str, plane: int) -> str:
    """The host's address on its NIC of that plane: routed over that plane only."""
    return str(interfaces(topo)[Port(host, topo.hosts[host].nic_on(plane).name)].address.ip)


TRIES = 3  # draws of source ports to find one a spine carries


def spine_port(lab: Lab, src: str, dst: str, port: int, spine: str, spread: Spread, *, plane: int | None = None,
               want: int = 8, seed: int = 7) -> int:
    """A source port whose src -> dst:port TCP flows the fabric hashes onto `spine` (traced from
    src): between the hosts' stable addresses, or their NICs' on `plane` where given."""
    if plane is None:
        a, b = address(lab, src), address(lab, dst)
    else:
        a, b = nic_address(lab.topology, src, plane), nic_address(lab.topology, dst, plane)
    on_spine = {str(i.address.ip) for p, i in interfaces(lab.topology).items() if p.node == spine}
    # spread stops once the hops it has seen each have their share: a first batch of ports that
    # missed this spine (1% of draws with four spines) or lost its answers is drawn again, afresh
    for attempt in range(TRIES):
        with netns.entered(lab.ns(src)):
            ports = [p.sport for p in spread(a, b, port, want=want, seed=seed + attempt) if p.hop in on_spine]
        if ports:
            return ports[0]
    raise ClockfabricError(f"no source port from {src} to {dst} was found on {spine} in {TRIES} tries")


def flow(lab: Lab, logs: Path, jobid: str | None, src: str, dst: str, port: int, *, spine: str | None = None,
         spread: Spread | None = None, chunk: int = 65536, pause_s: float = 0.0, dscp: int = 0,
         plane: int | None = None) -> list[subprocess.Popen]:
    """A TCP flow src -> dst:port (its receiver first), as job `jobid` (None: as no job), pinned on
    `spine` where given (learned with `spread`), between the hosts' NICs on `plane` where given
    (else their stable addresses); the sender writes `chunk` bytes then sleeps `pause_s`, marking `dscp`."""
    if spine and spread is None:
        raise ClockfabricError(f"a flow pinned on {spine} needs the spread that learns its source port")
    sport = spine_port(lab, src, dst, port, spine, spread, plane=plane) if spine and spread else 0
    if plane is None:
        a, b = address(lab, src), address(lab, dst)
    else:
        a, b = nic_address(lab.topology, src, plane), nic_address(lab.topology, dst, plane)
    job = [sys.executable, "-m", "clockfabric.cli", "job", "run", "--name", jobid, "--"] if jobid else []
    name = f"{jobid or 'nojob'}-{src}-{dst}-{port}"
    procs = [lab.spawn(dst, [*job, sys.executable, "-c", RECEIVER, str(port)], f"{name} receiver",
                       log=logs / f"{name}-receiver.log")]
    try:
        procs.append(lab.spawn(src, [*job, sys.executable, "-c", SENDER, b, str(port), a, str(sport), str(chunk),
                                     str(pause_s), str(dscp)],
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


def senders(procs: list[subprocess.Popen]) -> list[int]:
    """The pids doing a flow's sending: the children of its `job run` wrappers (or the wrapper
    itself for a flow of no job), to stop and continue as a busy host would."""
    from clockfabric.lab.process import children

    return [kid for p in procs for kid in (children(p.pid) or [p.pid])]


def links_between(lab: Lab, a: str, b: str) -> set[str]:
    """The names of the links cabling node a to node b."""
    return {lk.name for lk in lab.topology.links if {lk.a.node, lk.b.node} == {a, b}}


def pinned_iperf(lab: Lab, src: str, dst: str, spine: str, spread: Spread, *, plane: int = 0,
                 seconds: float = 600, port: int = IPERF_PORT, congestion: str | None = None) -> list[subprocess.Popen]:
    """An iperf3 TCP flow src -> dst pinned on `spine`: the plane's NIC addresses, and a client
    port learned (with `spread`) to hash onto that spine; congestion: the sender's TCP congestion
    control (None: the namespace's default). Its server and client, to stop()."""
    a, b = nic_address(lab.topology, src, plane), nic_address(lab.topology, dst, plane)
    cport = spine_port(lab, src, dst, port, spine, spread, plane=plane, want=4)
    server = iperf_server(lab, dst, b, port)
    client = subprocess.Popen(command(lab, src, ["iperf3", "-c", b, "-B", a, "--cport", str(cport),
                                                 "-p", str(port), "-t", str(seconds)]
                                            + (["-C", congestion] if congestion else [])),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return [server, client]
