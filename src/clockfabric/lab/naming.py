"""Names: every namespace and cable of a lab carries the lab's name, so any lab, even a
crashed one, can be found and removed without touching anything else on the machine."""

from __future__ import annotations

import re

from clockfabric.errors import ClockfabricError
from clockfabric.topology.model import Topology

PREFIX = "cf"
SEP = "."  # not allowed in lab names, so "cf.<lab>.<node>" splits one way only, dotted node names too
IFNAME_MAX = 15  # Linux's IFNAMSIZ, less the terminating NUL
LAB_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,23}$")


def check_lab_name(name: str) -> str:
    if not LAB_NAME.match(name):
        raise ClockfabricError(f"lab name {name!r}: use lower-case letters, digits, '-' and '_' (at most 24)")
    return name


def netns_name(lab: str, node: str) -> str:
    return f"{PREFIX}{SEP}{lab}{SEP}{node}"


def netns_prefix(lab: str) -> str:
    return f"{PREFIX}{SEP}{lab}{SEP}"


def parse_netns(name: str) -> tuple[str, str] | None:
    """(lab, node) for one of our namespace names, else None."""
    parts = name.split(SEP, 2)
    if len(parts) == 3 and parts[0] == PREFIX and parts[2]:
        return parts[1], parts[2]
    return None


def link_alias(lab: str, link_name: str) -> str:
    return f"clockfabric lab={lab} link={link_name}"


def check_port_names(topo: Topology) -> None:
    """The lab names each veth after its port, so every port name must be a Linux interface
    name: a real switch's `Ethernet1/1` is refused here, in one line, before anything is built."""
    for lk in topo.links:
        for port in (lk.a, lk.b):
            if "/" in port.iface or len(port.iface) > IFNAME_MAX:
                raise ClockfabricError(
                    f"port {port}: the lab names each cable's end after its port, and Linux takes no '/' and "
                    f"at most {IFNAME_MAX} characters in an interface name; name it like swp1 (or swp1s0) "
                    "in a topology for the lab")
