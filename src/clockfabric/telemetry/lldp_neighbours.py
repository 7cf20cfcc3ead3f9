"""LLDP neighbours as metrics: the switch port each NIC is cabled to, as that switch announces it.

The agent listens on each NIC (lldp.Neighbours; real switches send LLDP every 30 s, lab
switch agents every few seconds). A neighbour is kept until its frame's TTL runs out.
The listener is the agent's (its LLDP service opens and closes it); this only reads it.
"""

from __future__ import annotations

from clockfabric.lldp import Neighbours
from clockfabric.telemetry.base import COLLECTORS, Collector, CollectorContext, Metric


class LldpCollector(Collector):
    name = "lldp"

    def __init__(self, neighbours: Neighbours | None):
        self.neighbours = neighbours

    def absent(self) -> str | None:
        if self.neighbours is None or not self.neighbours.socks:
            return "no NIC could listen for LLDP (raw packet sockets need root or CAP_NET_RAW)"
        return None

    def collect(self) -> list[Metric]:
        if self.neighbours is None:
            raise RuntimeError(f"not present: {self.absent()}")
        return [Metric("clockfabric_lldp_neighbour_info", 1.0 if seen else 0.0,
                       {"device": device, "neighbour": seen or ""},
                       help="1 with the neighbour (node:port) LLDP announces on this NIC; 0 if none is heard")
                for device, seen in self.neighbours.poll().items()]


@COLLECTORS.register("lldp", help="LLDP neighbours: the switch port each NIC is cabled to")
def lldp_collector(ctx: CollectorContext) -> LldpCollector:
    return LldpCollector(ctx.neighbours)
