"""An agent that needs no fleet file: a node's ports watched (their state by netlink, their LLDP
neighbours announced and heard) and pushed to the controller with what the node says of itself.

What the switch agent is (agent/switch.py), and what a host's agent runs in discovery mode before
its fleet file exists (agent/discovery.py). Its clock is the machine's, never synced: its events say
`synced: false`. Its events are held in a log on disk (agent/eventlog.py) until the controller has them.
"""

from __future__ import annotations

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


class PortsAgent:
    def __init__(self, name: str, ports: list[str], controller: str, token: str, *, info: dict,
                 interval_s: float = 1.0, ca_file: str | None = None, lldp_interval_s: float = 2.0,
                 event_log: Path | None = None):
        """`info`: what the node says of itself with every push (its role, its address)."""
        self.name = name
        self.ports = ports
        self.info = info
        # each port announces "node, port" by LLDP and hears its neighbour's announcements
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
        return events, samples, {**self.info, "pid": os.getpid()}

    def started(self) -> None:
        """Once its ports are watched and it pushes: what a subclass starts besides."""

    def stopped(self) -> None:
        """Before its pushes end: what a subclass stops besides."""

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
            self.started()
            self.stopping.wait()
        finally:
            self.stopped()
            if self.lldp:
                self.lldp.stop()
            self.pusher.stop()
            self.pusher.join(6)
            self.links.stop()
            if self.neighbours:
                self.neighbours.close()
