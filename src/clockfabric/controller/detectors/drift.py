"""Topology drift: a NIC whose observed neighbour (lldpd, or the lab) is not the one the topology expects.

A neighbour is written "node" or "node:iface"; with an iface, a cable in the right switch but
the wrong port is drift too. The latest observation of each NIC stands until the next; None
(nothing seen) withdraws it, since a silent neighbour is the link-down detector's business.
"""

from __future__ import annotations

from dataclasses import dataclass

from clockfabric.controller.detectors.base import DETECTORS, Detector, DetectorContext, Finding
from clockfabric.controller.detectors.config import DetectorConfig
from clockfabric.topology.model import Port


@dataclass(frozen=True)
class DriftConfig(DetectorConfig):
    """No thresholds: a neighbour is the expected one or not."""


@DETECTORS.register("topology_drift", help="A NIC whose LLDP neighbour is not the one the topology expects")
class TopologyDrift(Detector[DriftConfig]):
    config_type = DriftConfig
    needs_topology = True  # without a topology nothing is expected, so nothing can drift

    def __init__(self, config: DriftConfig, ctx: DetectorContext):
        super().__init__(config, ctx)
        self.links = ctx.links
        self.drifted: dict[Port, tuple[str, int]] = {}  # NIC -> (neighbour seen, since)

    def on_neighbours(self, host: str, nic: str, seen: str | None, now_ns: int) -> None:
        port = Port(host, nic)
        link = self.links.at(host, nic)
        expected = link.other(host) if link else None
        if not seen or (expected and seen in (str(expected), expected.node)):
            self.drifted.pop(port, None)
        elif self.drifted.get(port, ("",))[0] != seen:  # a repeat of the same sighting keeps its start
            self.drifted[port] = (seen, now_ns)

    def findings(self, now_ns: int) -> list[Finding]:
        out = []
        for port, (seen, since_ns) in sorted(self.drifted.items()):
            link = self.links.at(port.node, port.iface)
            expected = str(link.other(port.node)) if link else None
            wanted = f"the topology expects {expected}" if expected else "the topology has no link there"
            out.append(Finding(
                key=f"topology_drift:{port}", kind="topology_drift", severity=self.config.severity,
                message=f"{port} sees {seen} as its neighbour; {wanted}",
                detail={"port": str(port), "seen": seen, "expected": expected,
                        "link": link.name if link else None, "since_ns": since_ns}))
        return out
