"""A fleet of real hosts from its fleet file: the topology YAML with each host's address, and
the `ssh:` sections that say how each is reached (hosts/options.py)."""

from __future__ import annotations

from pathlib import Path

from clockfabric.hosts.base import Host, HostFleet, Hosts
from clockfabric.hosts.options import options
from clockfabric.hosts.ssh import SshHost
from clockfabric.topology import load


def fleet_hosts(path: str | Path, **cli) -> Hosts:
    """Every host of the fleet file, reached over ssh. cli: SshOptions' fields, over the file's."""
    return open_fleet(path, **cli).hosts


def open_fleet(path: str | Path, **cli) -> HostFleet:
    topo = load(Path(path))
    opts = options(topo, Path(path), **cli)
    hosts: dict[str, Host] = {h: SshHost(h, str(node.address), opts[h]) for h, node in topo.hosts.items()}
    return HostFleet(str(path), topo, Hosts(hosts, f"fleet file {path}"))
