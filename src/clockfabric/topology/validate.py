"""Checks a topology needs beyond its syntax: addresses, planes, cabling, reachability."""

from __future__ import annotations

import ipaddress
from collections import Counter, defaultdict

from clockfabric.topology.addressing import PLANE_BITS, interfaces, links_per_plane_max
from clockfabric.topology.model import Port, Topology


def problems(topo: Topology) -> list[str]:
    out: list[str] = []
    if topo.host_pool.overlaps(topo.fabric_pool):
        out.append(f"addressing: hosts {topo.host_pool} overlaps fabric {topo.fabric_pool}; pick disjoint prefixes")
    for address, count in Counter(h.address for h in topo.hosts.values()).items():
        if count > 1:
            names = ", ".join(h.name for h in topo.hosts.values() if h.address == address)
            out.append(f"duplicate address {address} on hosts {names}; give each host its own")
    for h in topo.hosts.values():
        if h.address not in topo.host_pool or h.address in (topo.host_pool.network_address,
                                                            topo.host_pool.broadcast_address):
            out.append(f"host {h.name}: address {h.address} is not a usable address of addressing.hosts "
                       f"{topo.host_pool}; move it inside or widen the pool")
        for plane, count in Counter(n.plane for n in h.nics).items():
            if count > 1:
                out.append(f"host {h.name}: {count} NICs on plane {plane}; one NIC per plane")
        out += [f"host {h.name}: NIC {n.name}: {p}" for n in h.nics if n.address and (p := _given_problem(n.address))]
    for address6, count in Counter(h.address6 for h in topo.hosts.values() if h.address6).items():
        if count > 1:
            names = ", ".join(h.name for h in topo.hosts.values() if h.address6 == address6)
            out.append(f"duplicate address6 {address6} on hosts {names}; give each host its own")

    cabled = {p for lk in topo.links for p in (lk.a, lk.b)}
    for h in topo.hosts.values():
        for n in h.nics:
            if not any(p.node == h.name and p.iface == n.name for p in cabled):
                out.append(f"host {h.name}: NIC {n.name} (plane {n.plane}) has no link; cable it or remove it")
    per_plane: Counter[int] = Counter()
    for lk in topo.links:
        pa, pb = topo.plane_of(lk.a), topo.plane_of(lk.b)
        if pa != pb:
            out.append(f"link {lk.name} joins plane {pa} to plane {pb}; planes never meet")
        per_plane[pa] += 1
    for plane, count in per_plane.items():
        if count > links_per_plane_max(topo):
            out.append(f"plane {plane} has {count} links but addressing.fabric gives each plane room for "
                       f"{links_per_plane_max(topo)}; use a larger fabric prefix")
    if any(p >= 2**PLANE_BITS for p in topo.planes):
        out.append(f"planes must be numbered below {2**PLANE_BITS}")
    if out:
        return out
    return _shared_addresses(topo) or _unreachable(topo)


def _given_problem(address: ipaddress.IPv4Interface) -> str | None:
    net = address.network
    if net.prefixlen > 31:
        return f"address {address} leaves no address for the far end of its link; give it a /31 or wider"
    if net.prefixlen < 31 and address.ip in (net.network_address, net.broadcast_address):
        return f"address {address} is its subnet's network or broadcast address; pick a usable one"
    return None


def _shared_addresses(topo: Topology) -> list[str]:
    """Two ports with one address: a given NIC address that clashes with another or with the plan's.
    The far ends of given addresses may share one (a leaf's gateway on a wider prefix serves many)."""
    owners: dict[object, list[str]] = defaultdict(list)
    far_ends: dict[object, list[str]] = defaultdict(list)
    for itf in interfaces(topo).values():
        derived = itf.port.node in topo.switches and _given(topo, itf.peer)
        (far_ends if derived else owners)[itf.address.ip].append(str(itf.port))
        if itf.address6:
            owners[itf.address6.ip].append(str(itf.port))
    out = [f"address {a} is on both {' and '.join(ports)}; give each port its own"
           for a, ports in owners.items() if len(ports) > 1]
    out += [f"address {a} of {owners[a][0]} is also the far end of the given address on {', '.join(ports)}; "
            "give each port its own" for a, ports in far_ends.items() if a in owners]
    return out


def _given(topo: Topology, port: Port) -> bool:
    host = topo.hosts.get(port.node)
    return bool(host and any(n.name == port.iface and n.address for n in host.nics))


def _unreachable(topo: Topology) -> list[str]:
    """One line per host that cannot reach some other host over any plane."""
    # A host has one NIC per plane, so it can never be a transit node: components suffice.
    component: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for plane in topo.planes:
        for cid, nodes in enumerate(_components(topo, plane)):
            for n in nodes:
                component[n].add((plane, cid))
    out = []
    hosts = list(topo.hosts)
    for h in hosts:
        lost = [g for g in hosts if g != h and not component[h] & component[g]]
        if lost:
            shown = ", ".join(lost[:3]) + (f" and {len(lost) - 3} more" if len(lost) > 3 else "")
            out.append(f"host {h} has no path to {shown}; add links so every plane is connected")
    return out


def _components(topo: Topology, plane: int) -> list[set[str]]:
    """The connected components of one plane, by union-find over its links (no networkx: agents
    load and validate topologies, and should not pay for a graph library they never use)."""
    parent: dict[str, str] = {}

    def root(node: str) -> str:
        while parent.setdefault(node, node) != node:
            parent[node] = parent[parent[node]]  # halve the path as we go
            node = parent[node]
        return node

    for s in topo.switches.values():
        if s.plane == plane:
            root(s.name)
    for h in topo.hosts.values():
        if h.nic(plane):
            root(h.name)
    for lk in topo.links:
        if topo.plane_of(lk.a) == plane:
            parent[root(lk.a.node)] = root(lk.b.node)
    groups: dict[str, set[str]] = defaultdict(set)
    for node in list(parent):
        groups[root(node)].add(node)
    return list(groups.values())
