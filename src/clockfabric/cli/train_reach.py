"""How `clockfabric train run` reaches its hosts: a lab's namespaces, or real hosts over ssh.

Everything the coordinator and the re-admission audit need from the place the job runs, in
one value, so the rest of the command never asks which it is.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clockfabric.hosts import Host
from clockfabric.topology import Topology


@dataclass
class Reach:
    hosts: Mapping[str, Host]
    topology: Topology
    audit: Callable[[], dict[str, Any]]  # audit()'s keywords, anew for each audit: its transport and friends
    fleet: str  # names the place in messages
    runner: Callable[[str], list[str]]  # host -> the argv prefix that runs a Python script there
    serve_on: str | None  # the address the board is served on (None: a FileStore, every host shares it)
    local: bool  # the members' processes run on this machine


def lab_reach(name: str | None) -> Reach:
    from clockfabric.lab.hosts import lab_audit, lab_hosts
    from clockfabric.lab.state import Lab
    from clockfabric.lab.training import runner

    lab = Lab.open(name)
    return Reach(lab_hosts(lab), lab.topology, lambda: lab_audit(lab), f"lab {lab.name}", runner(lab), None, True)


def fleet_reach(path: Path, serve_on: str | None, names: list[str] | None = None) -> Reach:
    """names: the job's hosts, the first one's route giving serve_on (None: nothing is served)."""
    from clockfabric.audit.gather import HostsSession
    from clockfabric.hosts.fleet import open_fleet
    from clockfabric.hosts.options import options

    fleet = open_fleet(path)
    opts = options(fleet.topology, path)
    if names and not serve_on:
        serve_on = route_to(fleet.hosts[names[0]].address)  # a name not in the file: one line, from the mapping

    def runner(host: str) -> list[str]:
        return [*opts[host].python.split()]

    transport = HostsSession(fleet.hosts, runner)  # audited through the seam the job runs on
    return Reach(fleet.hosts, fleet.topology, lambda: {"transport": transport}, f"fleet {path}", runner, serve_on,
                 False)


def route_to(address: str) -> str:
    """This machine's address on the route to `address` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((address, 9))
        return str(s.getsockname()[0])
