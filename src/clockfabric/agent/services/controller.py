"""Pushes to the controller: events and samples from every service, and the path map (which
spine each probe path crosses: the controller names congested links with it).

The path map is learned only for the controller, and sent whole with every push, so both
live here. A link change or a failover decision is pushed at once, not at the next update.
"""

from __future__ import annotations

import os
import time

from clockfabric.agent.config import AgentConfig
from clockfabric.agent.context import AgentContext
from clockfabric.agent.eventlog import EventLog
from clockfabric.agent.pathmap import PathMapper
from clockfabric.agent.push import Pusher
from clockfabric.agent.service import Service, service


def _wanted(cfg: AgentConfig) -> bool:
    return bool(cfg.controller)


@service("controller", wanted=_wanted, help="Push events, samples and the path map to the controller")
class ControllerPush(Service):
    def __init__(self, ctx: AgentContext):
        cfg = ctx.cfg
        self.ctx = ctx
        assert cfg.controller  # _wanted: made only with one
        self.path_map = PathMapper(cfg.topology, cfg.host, cfg.probed, ctx.engine.flows, on_change=ctx.news)
        self.pusher = Pusher(cfg.controller, cfg.token, cfg.host, snapshot=ctx.push_snapshot,
                             interval_s=cfg.update_s, verify=cfg.ca_file or True, paths=lambda: self.path_map.rows,
                             log=EventLog(cfg.event_log), on_reply=self._answered)
        ctx.on_link_change += [self.path_map.wake, self.pusher.hold, self.pusher.wake]
        ctx.on_news.append(self.pusher.wake)

    def _answered(self, body: dict) -> None:
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
