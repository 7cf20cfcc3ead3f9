"""Static routing tables that make the fabric behave like a routed leaf-spine with ECMP.

Switches route every host address and every remote link /31 over all shortest paths in
their plane (equal-cost multipath); hosts send other hosts' addresses over every NIC
and each plane's link addresses out of that plane's NIC. A real fabric learns the same
tables with BGP; here they follow from the topology, so the lab and the simulator agree.
"""

from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import dataclass

from clockfabric.topology.addressing import Interface, interfaces, plane_subnet
from clockfabric.topology.model import Topology


@dataclass(frozen=True)
class NextHop:
    iface: str
    gateway: ipaddress.IPv4Address


@dataclass(frozen=True)
class Route:
    dst: ipaddress.IPv4Network
    nexthops: tuple[NextHop, ...]
    src: ipaddress.IPv4Address | None = None


def routing_tables(topo: Topology, failed: frozenset[int] = frozenset()) -> dict[str, list[Route]]:
    """Every node's routes; switches route around the links (indexes into topo.links) in `failed`,
    as a fabric running BGP with BFD converges. Hosts keep theirs: moving them is the agent's job."""
    ifaces = interfaces(topo)
    tables: dict[str, list[Route]] = {n: [] for n in topo.nodes()}
    by_node: dict[str, list[Interface]] = {n: [] for n in topo.nodes()}
    for itf in ifaces.values():
        by_node[itf.port.node].append(itf)
    alive = {n: [i for i in itfs if i.link_index not in failed] for n, itfs in by_node.items()}

    for h in topo.hosts.values():
        mine = by_node[h.name]
        tables[h.name].append(Route(topo.host_pool,
                                    tuple(NextHop(i.port.iface, i.peer_address) for i in mine), h.address))
        for itf in mine:
            plane = topo.plane_of(itf.port)
            tables[h.name].append(Route(plane_subnet(topo, plane), (NextHop(itf.port.iface, itf.peer_address),),
                                        itf.address.ip))

    for plane in topo.planes:
        # destinations of this plane: each host address, and each link /31 (reached via its two ends)
        dests: list[tuple[ipaddress.IPv4Network, set[str]]] = [
            (ipaddress.IPv4Network(h.address), {h.name}) for h in topo.hosts.values() if h.nic(plane)]
        dests += [(itf.address.network, {itf.port.node, itf.peer.node})
                  for itf in ifaces.values() if topo.plane_of(itf.port) == plane and itf.port < itf.peer]
        for dst, targets in dests:
            dist = _distances(topo, alive, targets)
            for sw in (s for s in topo.switches.values() if s.plane == plane):
                if sw.name in targets or sw.name not in dist:
                    continue
                hops = tuple(NextHop(i.port.iface, i.peer_address) for i in alive[sw.name]
                             if dist.get(i.peer.node) == dist[sw.name] - 1)
                tables[sw.name].append(Route(dst, hops))
    return tables


def _distances(topo: Topology, by_node: dict[str, list[Interface]], targets: set[str]) -> dict[str, int]:
    """Hop counts to the nearest target; only targets and switches pass traffic on."""
    dist = {t: 0 for t in targets}
    queue = deque(targets)
    while queue:
        node = queue.popleft()
        if node not in targets and node not in topo.switches:
            continue
        for itf in by_node[node]:
            if itf.peer.node not in dist:
                dist[itf.peer.node] = dist[node] + 1
                queue.append(itf.peer.node)
    return dist
