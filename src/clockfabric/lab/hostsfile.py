"""Name resolution inside the lab: every host namespace gets an /etc/hosts of its own that
names every lab host, as a fleet's DNS or hosts file would.

`ip netns exec NS` bind-mounts each file in /etc/netns/NS/ over its namesake in /etc, so
processes on a lab host (run through `lab exec`) read it; the machine's own /etc/hosts is
never touched. The files are named after our namespaces and removed with the lab.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from clockfabric.lab.naming import netns_prefix
from clockfabric.topology import Topology

ETC_NETNS = Path("/etc/netns")


def write(topo: Topology, ns_of) -> None:
    """ns_of: host name -> its namespace's name."""
    lines = ["127.0.0.1\tlocalhost", *(f"{h.address}\t{h.name}" for h in topo.hosts.values())]
    for h in topo.hosts:
        folder = ETC_NETNS / ns_of(h)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts").write_text("\n".join(lines) + "\n")


def remove(lab_name: str) -> None:
    for folder in ETC_NETNS.glob(f"{netns_prefix(lab_name)}*"):
        shutil.rmtree(folder, ignore_errors=True)
