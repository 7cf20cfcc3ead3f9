"""Pushes to the controller: events and samples from every service, the path map (which
spine each probe path crosses: the controller names congested links with it), and the digest of
them the detectors read (agent.digest), worked out as the last push's answer asks.

The path map is learned only for the controller, and sent whole with every push, so both
live here. A link change or a failover decision is pushed at once, not at the next update.
"""

from __future__ import annotations

import os
import time

from clockfabric.agent import digest
from clockfabric.agent.config import AgentConfig
from clockfabric.agent.context import AgentContext
from clockfabric.agent.eventlog import EventLog
from clockfabric.agent.pathmap import PathMapper
from clockfabric.agent.push import Pusher
from clockfabric.agent.service import Service, service
from clockfabric.topology import host_of_address


def _wanted(cfg: AgentConfig) -> bool:
    return bool(cfg.controller)


@service("controller", wanted=_wanted, help="Push events, samples and the path map to the controller")
class ControllerPush(Service):
    def __init__(self, ctx: AgentContext):
        cfg = ctx.cfg
        self.ctx = ctx
        assert cfg.controller  # _wanted: made only with one
        self.path_map = PathMapper(cfg.topology, cfg.host, cfg.probed, ctx.engine.flows, on_change=ctx.news)
        self.host_of = host_of_address(cfg.topology)
        self.ask: digest.Ask | None = None  # the congestion detector's, from the last answer
        self.pusher = Pusher(cfg.controller, cfg.token, cfg.host, snapshot=self._snapshot,
                             interval_s=cfg.update_s, verify=cfg.ca_file or True, paths=lambda: self.path_map.rows,
                             log=EventLog(cfg.event_log), on_reply=self._answered)
        ctx.on_link_change += [self.path_map.wake, self.pusher.hold, self.pusher.wake]
        ctx.on_news.append(self.pusher.wake)

    def _snapshot(self) -> tuple[list[dict], list[dict], dict]:
        """Every service's part, and the digest of it the controller's detectors read."""
        events, samples, info = self.ctx.push_snapshot()
        host = self.ctx.cfg.host
        samples += digest.flow_probes(samples, host, self.host_of)
        if self.ask is not None:
            mapped = [(peer, label) for peer, label, _, _ in self.path_map.rows]
            samples += digest.queueing(samples, host, mapped, self.ask)
        return events, samples, info

    def _answered(self, body: dict) -> None:
        self.ask = digest.Ask.heard(body)
        for hear in self.ctx.on_reply:  # the QoS policies ride on the answer
            hear(body)

    def start(self) -> None:
        self.pusher.add_events([{"t_ns": time.time_ns(), "synced": False, "kind": "agent_start",
                                 "detail": {"pid": os.getpid()}}])
        self.pusher.start()
        self.path_map.start()

    def report(self) -> dict:
        c = self.pusher.counters
        return {"path_map": [{"dst": peer, "path": label, "plane": plane, "via": via}
                             for peer, label, plane, via in self.path_map.rows],
                "push": {"quarantined": c["quarantined"], "failures": c["push_failures"]},
                "events": {"held": len(self.pusher.pending), "sent": c["events_sent"], "dropped": c["events_dropped"]}}

    def stop(self) -> None:
        self.path_map.stop()
        self.pusher.stop()
        self.pusher.join(6)  # its last push: what happened just before the stop
