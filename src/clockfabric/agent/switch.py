"""A switch's own link telemetry: its ports' state by netlink and its LLDP neighbours, pushed to the controller.

Real switches stream this themselves (gNMI subscriptions, SNMP traps); in the lab each
switch is a namespace, and this small agent plays that part, so a leaf-spine link that
flaps is seen on the link itself, not guessed from the hosts. Switch clocks in the lab are
the machine's true clock, not synced to global time: events say `synced: false`. Its events
are held in a log on disk (agent/eventlog.py) until the controller has them, as a host agent's.
"""

from __future__ import annotations

from pathlib import Path

from clockfabric.agent.ports import PortsAgent


class SwitchAgent(PortsAgent):
    def __init__(self, name: str, ports: list[str], controller: str, token: str, *, interval_s: float = 1.0,
                 ca_file: str | None = None, lldp_interval_s: float = 2.0, event_log: Path | None = None):
        # a switch announces each port by LLDP, and hears the hosts' announcements: a miscabled
        # host is seen from the switch even when the host cannot reach the controller
        super().__init__(name, ports, controller, token, info={"role": "switch"}, interval_s=interval_s,
                         ca_file=ca_file, lldp_interval_s=lldp_interval_s, event_log=event_log)
