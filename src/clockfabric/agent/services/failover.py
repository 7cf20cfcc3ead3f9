"""Plane failover: heartbeats on every path to every peer, traffic moved off a failed plane
(and back after a hold-down), optionally single TCP flows steered off a congested one.

Only hosts with two or more NICs run it, and only they load the failover stack (pyroute2
alone is ~0.2 s of start-up: 32 agents starting on two cores wait for each other's imports).
"""

from __future__ import annotations

import logging

from clockfabric.agent.config import AgentConfig
from clockfabric.agent.context import AgentContext
from clockfabric.agent.service import Service, Snapshot, service
from clockfabric.auth.seal import HEARTBEAT
from clockfabric.errors import ClockfabricError
from clockfabric.probe.paths import trace

log = logging.getLogger(__name__)


def _wanted(cfg: AgentConfig) -> bool:
    return bool(cfg.failover)


@service("failover", wanted=_wanted, help="Move traffic off failed planes; steer flows off congested ones")
class PlaneFailover(Service):
    def __init__(self, ctx: AgentContext):
        from clockfabric.traffic.decide import Policy
        from clockfabric.traffic.failover import Failover, Heartbeats
        from clockfabric.traffic.steer import SteerPolicy

        cfg, links = ctx.cfg, ctx.links
        self.ctx = ctx
        if not links.running:  # heartbeats still see every failure, a little later
            log.warning("failover without link events: local failures are seen by heartbeats only")

        def nic_up(name: str) -> bool | None:
            state = links.state(name) if links.running else None
            return None if state is None else state.up

        nics = {n.plane: n.name for n in cfg.topology.hosts[cfg.host].nics}
        peers = {h: a for h, a in ctx.addresses.items() if h != cfg.host}
        try:
            self.failover = Failover(ctx.address, peers, nics, nic_up=nic_up,
                                     heartbeats=Heartbeats(interval_s=cfg.failover_interval_s,
                                                           sealer=ctx.sealers[HEARTBEAT]),
                                     policy=Policy(hold_down_s=cfg.hold_down_s), on_decision=ctx.news,
                                     steer=SteerPolicy() if cfg.steer else None, trace=trace)
        except OSError as e:
            raise ClockfabricError(f"cannot open failover heartbeat ports on {ctx.address} ({e.strerror}): "
                                   "is another agent running on this host?") from None
        # acted on at once; a NIC back as a new device is bound to again (Failover.run)
        ctx.on_link_change.append(self.failover.wake)
        self._decisions_seen = 0

    def start(self) -> None:
        self.failover.start()

    def report(self) -> dict:
        return {"failover": self.failover.state()}

    def snapshot(self) -> Snapshot:
        """Its decisions since the last push, as events."""
        events = []
        for d in self.failover.events(self._decisions_seen):
            self._decisions_seen = d["seq"]
            t_ns, synced = self.ctx.to_time(d["t_ns"])
            events.append({"t_ns": t_ns, "synced": synced, "kind": f"failover_{d['kind']}", "device": d["peer"],
                           "detail": {k: v for k, v in d.items() if k not in ("seq", "t_ns", "kind", "peer")}})
        return Snapshot(events=events)

    def stop(self) -> None:  # its routes stay in the kernel: a restarted agent adopts them
        self.failover.stop()
        self.failover.join(2)
