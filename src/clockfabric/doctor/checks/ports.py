"""The agent's ports on the host's address: free, and the address this host's own."""

from __future__ import annotations

import errno
import socket

from clockfabric.agent.config import CONTROL_PORT
from clockfabric.audit.model import Verdict
from clockfabric.doctor.base import CHECKS, Outcome, Setup


def agent_ports(setup: Setup) -> list[tuple[str, int, str]]:
    """(protocol, port, what) the agent binds, as agent.agent and its services do."""
    cfg = setup.config
    span = cfg.ports * 2  # reflectors base..base+ports-1, probers' sources above them
    out = [("udp", CONTROL_PORT, "control")]
    out += [("udp", cfg.base_port + k, "probes") for k in range(span)]
    if cfg.metrics_port:
        out.append(("tcp", cfg.metrics_port, "/metrics"))
    return out


def _bind(protocol: str, address: str, port: int) -> OSError | None:
    kind = socket.SOCK_DGRAM if protocol == "udp" else socket.SOCK_STREAM
    with socket.socket(socket.AF_INET, kind) as s:
        if protocol == "tcp":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn and http.server do
        try:
            s.bind((address, port))
            if protocol == "tcp":
                s.listen()
        except OSError as e:
            return e
    return None


def _listed(ports: list[tuple[str, int, str]]) -> str:
    """udp/7299, udp/7300-7307, tcp/9470: each protocol's consecutive ports as one range."""
    runs: list[list] = []
    for protocol, port, _ in ports:
        if runs and runs[-1][0] == protocol and runs[-1][2] == port - 1:
            runs[-1][2] = port
        else:
            runs.append([protocol, port, port])
    return ", ".join(f"{p}/{a}" if a == b else f"{p}/{a}-{b}" for p, a, b in runs)


@CHECKS.register("ports", help="the agent's UDP and TCP ports free on the host's address")
def ports(setup: Setup) -> list[Outcome]:
    cfg = setup.config
    address = str(cfg.topology.hosts[cfg.host].address)
    wanted = agent_ports(setup)
    busy: list[tuple[str, int, str, OSError]] = []
    for protocol, port, what in wanted:
        e = _bind(protocol, address, port)
        if e is not None and e.errno == errno.EADDRNOTAVAIL:
            return [Outcome("ports", Verdict.FAIL, f"{address}, host {cfg.host}'s address in the fleet file, is "
                                                   "not on this host",
                            f"check that --host {cfg.host} is this host, then add {address}/32 to its loopback "
                            "(the agent binds there)")]
        if e is not None:
            busy.append((protocol, port, what, e))
    if busy:
        protocol, port = busy[0][:2]
        said = "; ".join(f"{p}/{n} ({what}): {e.strerror}" for p, n, what, e in busy)
        return [Outcome("ports", Verdict.FAIL, f"on {address}: {said}",
                        f"stop what holds them (ss -lp{protocol[0]}n 'sport = :{port}'); an agent already running "
                        "here holds them all")]
    return [Outcome("ports", Verdict.PASS, f"free on {address}: {_listed(wanted)}")]
