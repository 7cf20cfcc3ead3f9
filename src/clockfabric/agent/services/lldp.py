"""LLDP: announce "host, NIC" on each NIC (as lldpd does) and hear each NIC's neighbour; the
neighbours go to the controller with each push, and to the `lldp` collector."""

from __future__ import annotations

from clockfabric import lldp
from clockfabric.agent.context import AgentContext
from clockfabric.agent.push import neighbour_samples
from clockfabric.agent.service import Service, Snapshot, service


@service("lldp", help="LLDP: announce this host's NICs, hear their neighbours")
class Lldp(Service):
    def __init__(self, ctx: AgentContext):
        self.neighbours, self.announcer = lldp.for_ports(ctx.cfg.host, ctx.rails, ctx.cfg.lldp_interval_s)
        ctx.neighbours = self.neighbours

    def start(self) -> None:
        if self.announcer:
            self.announcer.start()

    def snapshot(self) -> Snapshot:
        return Snapshot(samples=neighbour_samples(self.neighbours.poll()) if self.neighbours else [])

    def stop(self) -> None:
        if self.announcer:
            self.announcer.stop()
        if self.neighbours:
            self.neighbours.close()
