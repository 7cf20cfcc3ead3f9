"""The address plan, derived from the topology alone so every layer computes the same one.

- each host has a stable address from addressing.hosts (on its loopback in the lab);
- every link is a /31; plane r takes the r-th slice of addressing.fabric for its links,
  so a host routes "plane r's fabric" out of NIC r.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from clockfabric.topology.model import Port, Topology

PLANE_BITS = 6  # addressing.fabric is cut into 64 plane slices


@dataclass(frozen=True)
class Interface:
    port: Port
    address: ipaddress.IPv4Interface  # a /31 shared with the peer
    peer: Port
    peer_address: ipaddress.IPv4Address
    link_index: int


def plane_subnet(topo: Topology, plane: int) -> ipaddress.IPv4Network:
    prefix = topo.fabric_pool.prefixlen + PLANE_BITS
    size = 2 ** (32 - prefix)
    return ipaddress.IPv4Network((int(topo.fabric_pool.network_address) + plane * size, prefix))


def links_per_plane_max(topo: Topology) -> int:
    return 2 ** (32 - topo.fabric_pool.prefixlen - PLANE_BITS) // 2


def interfaces(topo: Topology) -> dict[Port, Interface]:
    """Every cabled port with its /31, in link order within each plane."""
    out: dict[Port, Interface] = {}
    used: dict[int, int] = {}
    for i, lk in enumerate(topo.links):
        plane = topo.plane_of(lk.a)
        k = used.get(plane, 0)
        used[plane] = k + 1
        base = plane_subnet(topo, plane).network_address + 2 * k
        out[lk.a] = Interface(lk.a, ipaddress.IPv4Interface(f"{base}/31"), lk.b, base + 1, i)
        out[lk.b] = Interface(lk.b, ipaddress.IPv4Interface(f"{base + 1}/31"), lk.a, base, i)
    return out
