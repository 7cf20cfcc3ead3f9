"""A switch's own link telemetry: its ports' state by netlink, pushed to the controller.

Real switches stream this themselves (gNMI subscriptions, SNMP traps); in the lab each
switch is a namespace, and this small agent plays that part, so a leaf-spine link that
flaps is seen on the link itself, not guessed from the hosts. Switch clocks in the lab are
the machine's true clock, not synced to global time: events say `synced: false`.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from clockfabric.agent.push import Pusher, link_payload
from clockfabric.errors import ClockfabricError
from clockfabric.telemetry.links import LinkWatcher

log = logging.getLogger(__name__)


class SwitchAgent:
    def __init__(self, name: str, ports: list[str], controller: str, token: str, *, interval_s: float = 1.0,
                 ca_file: str | None = None):
        self.name = name
        self.pusher = Pusher(controller, token, name, snapshot=self._snapshot, interval_s=interval_s,
                             verify=ca_file or True)
        self.links = LinkWatcher(ports, on_change=self.pusher.wake)  # a port going down is pushed at once
        self._seen = 0
        self.stopping = threading.Event()

    def _snapshot(self) -> tuple[list[dict], list[dict], dict]:
        events, samples, self._seen = link_payload(self.links, self._seen, lambda t: (t, False))
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
        try:
            self.stopping.wait()
        finally:
            self.pusher.stop()
            self.pusher.join(6)
            self.links.stop()
