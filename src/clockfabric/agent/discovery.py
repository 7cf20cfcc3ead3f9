"""The agent in discovery mode (`clockfabric agent --discover`): a host with no fleet file yet.

It runs what needs no fleet: LLDP on its NICs (announcing "host, NIC" and hearing each NIC's
neighbour), link telemetry and the collectors behind /metrics, and pushes of its address and its
neighbours to the controller, which holds it for approval (`--enroll pending`) or takes it. What
needs peers (probes, clock sync, failover, steering) waits for the fleet file `clockfabric
discover` writes from what every host pushed: the agent is then started with `--topology`.
"""

from __future__ import annotations

import logging
import re
import socket
import urllib.parse
from pathlib import Path

from clockfabric.agent.metrics import AgentMetrics, serve
from clockfabric.agent.ports import PortsAgent
from clockfabric.errors import ClockfabricError
from clockfabric.telemetry.base import COLLECTORS, CollectorContext, Collectors

log = logging.getLogger(__name__)
SYS_CLASS_NET = Path("/sys/class/net")
ARPHRD_ETHER = 1


def _natural(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def host_nics(root: Path = SYS_CLASS_NET) -> list[str]:
    """This host's NICs: its Ethernet interfaces with a device behind them (PCI, virtio); where none
    has one (a container's or a network namespace's veths), every Ethernet interface. Loopback,
    bridges and bonds are never NICs."""
    ether: list[tuple[str, bool]] = []
    for d in root.iterdir() if root.is_dir() else []:
        try:
            kind = int((d / "type").read_text())
        except (OSError, ValueError):
            continue
        if d.name == "lo" or kind != ARPHRD_ETHER or (d / "bridge").exists() or (d / "bonding").exists():
            continue
        ether.append((d.name, (d / "device").exists()))
    physical = [name for name, device in ether if device]
    return sorted(physical or [name for name, _ in ether], key=_natural)


def source_address(controller: str) -> str:
    """The address this host reaches the controller from (the first of its replicas): the one it is
    known by, unless the operator gives another."""
    url = urllib.parse.urlsplit(controller.split(",")[0].strip())
    host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError) as e:
        raise ClockfabricError(f"cannot resolve the controller {host!r} ({e}): give --address, the address "
                               "this host is known by") from None
    for family, _, _, _, sockaddr in found:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            try:
                s.connect(sockaddr)  # UDP: no packet sent; the kernel picks the route and its source
                return str(s.getsockname()[0])
            except OSError:
                continue
    raise ClockfabricError(f"no route from this host to the controller {host}: give --address, the address "
                           "this host is known by")


class DiscoveryAgent(PortsAgent):
    def __init__(self, host: str, nics: list[str], controller: str, token: str, *, address: str,
                 metrics_port: int = 0, collectors: tuple[str, ...] = (), no_collectors: tuple[str, ...] = (),
                 interval_s: float = 1.0, ca_file: str | None = None, lldp_interval_s: float = 5.0,
                 event_log: Path | None = None):
        if not nics:
            raise ClockfabricError("this host has no Ethernet NIC to hear LLDP on: give --nic NAME")
        super().__init__(host, nics, controller, token, info={"role": "host", "address": address,
                                                              "mode": "discovery"},
                         interval_s=interval_s, ca_file=ca_file, lldp_interval_s=lldp_interval_s, event_log=event_log)
        self.address = address
        context = CollectorContext(nics, self.links, self.neighbours)
        self.collectors = Collectors(entry.factory(context) for entry in COLLECTORS.enabled(collectors, no_collectors))
        self.server = None
        if metrics_port:
            try:
                self.server = serve(AgentMetrics(host, self.collectors, lambda: None), address, metrics_port)
            except OSError as e:
                self.collectors.close()
                raise ClockfabricError(f"cannot serve /metrics on {address}:{metrics_port} ({e.strerror}): give "
                                       "another --metrics-port, or 0 for none") from None

    def started(self) -> None:
        log.info("discovery mode: no fleet file; LLDP on %s, telemetry%s, pushing as %s (address %s) to %s; no "
                 "probes, clock sync or failover until the agent runs with --topology", ", ".join(self.ports),
                 " and /metrics" if self.server else "", self.name, self.address, self.pusher.url.rsplit("/api/", 1)[0])

    def stopped(self) -> None:
        if self.server:
            self.server.shutdown()
        self.collectors.close()
