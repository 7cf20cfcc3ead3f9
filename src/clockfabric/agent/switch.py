"""A switch's own link telemetry: its ports' state by netlink and its LLDP neighbours, pushed to the controller.

Real switches stream this themselves (gNMI subscriptions, SNMP traps); in the lab each
switch is a namespace, and this small agent plays that part, so a leaf-spine link that
flaps is seen on the link itself, not guessed from the hosts. Switch clocks in the lab are
the machine's true clock, not synced to global time: events say `synced: false`. Its events
are held in a log on disk (agent/eventlog.py) until the controller has them, as a host agent's.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

from clockfabric import lldp
from clockfabric.agent.eventlog import EventLog
from clockfabric.agent.push import Pusher, link_payload, neighbour_samples
from clockfabric.errors import ClockfabricError
from clockfabric.telemetry.link_watcher import LinkWatcher

log = logging.getLogger(__name__)


class SwitchAgent:
    def __init__(self, name: str, ports: list[str], controller: str, token: str, *, interval_s: float = 1.0,
                 ca_file: str | None = None, lldp_interval_s: float = 2.0, event_log: Path | None = None):
        self.name = name
        # a switch announces each port by LLDP, and hears the hosts' announcements: a miscabled
        # host is seen from the switch even when the host cannot reach the controller
        self.neighbours, self.lldp = lldp.for_ports(name, ports, lldp_interval_s)
        self.pusher = Pusher(controller, token, name, snapshot=self._snapshot, interval_s=interval_s,
                             verify=ca_file or True, log=EventLog(event_log))
        self.links = LinkWatcher(ports, on_change=self._changed)
        self._seen = 0
        self.stopping = threading.Event()

    def _changed(self) -> None:
        """A port changed: on disk at once, pushed at once."""
        self.pusher.hold()
        self.pusher.wake()

    def _snapshot(self) -> tuple[list[dict], list[dict], dict]:
        events, samples, self._seen = link_payload(self.links, self._seen, lambda t: (t, False))
        if self.neighbours:
            samples += neighbour_samples(self.neighbours.poll())
        return events, samples, {"role": "switch", "pid": os.getpid()}

    def run(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stopping.set())
        try:
            self.links.start()
        except OSError as e:
            raise ClockfabricError(f"cannot watch {self.name}'s links by netlink: {e}") from None
        self.pusher.add_events([{"t_ns": time.time_ns(), "synced": False, "kind": "agent_start"}])
        self.pusher.start()
        if self.lldp:
            self.lldp.start()
        try:
            self.stopping.wait()
        finally:
            if self.lldp:
                self.lldp.stop()
            self.pusher.stop()
            self.pusher.join(6)
            self.links.stop()
            if self.neighbours:
                self.neighbours.close()
