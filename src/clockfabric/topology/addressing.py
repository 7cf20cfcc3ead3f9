"""The address plan, derived from the topology alone so every layer computes the same one.

- each host has a stable address from addressing.hosts (on its loopback in the lab);
- every link is a /31; plane r takes the r-th slice of addressing.fabric for its links,
  so a host routes "plane r's fabric" out of NIC r;
- a NIC whose address the file gives keeps it (a real fleet's NICs have theirs): its link
  takes no /31 from the plan, and the far end takes the /31's other address, or on a wider
  prefix the subnet's first address (a leaf's gateway, by convention) unless that is the NIC's.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from clockfabric.topology.model import Nic, Port, Topology

PLANE_BITS = 6  # addressing.fabric is cut into 64 plane slices


@dataclass(frozen=True)
class Interface:
    port: Port
    address: ipaddress.IPv4Interface  # a /31 shared with the peer, or the NIC's given address
    peer: Port
    peer_address: ipaddress.IPv4Address
    link_index: int
    address6: ipaddress.IPv6Interface | None = None  # a NIC's given IPv6 address


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
        given_a, given_b = _given(topo, lk.a), _given(topo, lk.b)
        if known := given_a or given_b:
            a, b = given_a or _far_end(known), given_b or _far_end(known)
            out[lk.a] = Interface(lk.a, a, lk.b, b.ip, i, _v6(topo, lk.a))
            out[lk.b] = Interface(lk.b, b, lk.a, a.ip, i, _v6(topo, lk.b))
            continue
        plane = topo.plane_of(lk.a)
        k = used.get(plane, 0)
        used[plane] = k + 1
        base = plane_subnet(topo, plane).network_address + 2 * k
        out[lk.a] = Interface(lk.a, ipaddress.IPv4Interface(f"{base}/31"), lk.b, base + 1, i, _v6(topo, lk.a))
        out[lk.b] = Interface(lk.b, ipaddress.IPv4Interface(f"{base + 1}/31"), lk.a, base, i, _v6(topo, lk.b))
    return out


def host_of_address(topo: Topology) -> dict[str, str]:
    """Every address a host sends from, its stable one and each of its NICs', -> the host: a flow
    bound to one NIC (a rank on its rail) names its peer by that NIC's address."""
    out = {str(itf.address.ip): itf.port.node for itf in interfaces(topo).values() if itf.port.node in topo.hosts}
    return out | {str(h.address): name for name, h in topo.hosts.items()}


def _nic(topo: Topology, port: Port) -> Nic | None:
    host = topo.hosts.get(port.node)
    return next((n for n in host.nics if n.name == port.iface), None) if host else None


def _given(topo: Topology, port: Port) -> ipaddress.IPv4Interface | None:
    nic = _nic(topo, port)
    return nic.address if nic else None


def _v6(topo: Topology, port: Port) -> ipaddress.IPv6Interface | None:
    nic = _nic(topo, port)
    return nic.address6 if nic else None


def _far_end(mine: ipaddress.IPv4Interface) -> ipaddress.IPv4Interface:
    """The other end of a link whose one address is known."""
    net = mine.network
    if net.prefixlen >= 31:
        other = net[0] if mine.ip == net[-1] else net[-1]
    else:
        first, second = net[1], net[2]
        other = second if mine.ip == first else first
    return ipaddress.IPv4Interface(f"{other}/{net.prefixlen}")
