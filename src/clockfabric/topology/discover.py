"""A fleet file from what running agents hear: each NIC's LLDP neighbour, each host's address.

Every agent pushes, per interface, the neighbour LLDP announces there ("node:port"); the
switch agents push their ports' too, and switches that run no agent give their own LLDP tables
(`with_switches`: lldpd's or SNMP's, topology/switch_table.py). Each heard pair is one cable. A
node that pushes with role "switch", or that is only ever heard, is a switch. Planes are what
the cabling says: each connected fabric of switches is one plane, numbered in the order of the
NIC names cabled to it (the fabric eth0s reach is plane 0 when eth0 comes first). A switch that
hosts are cabled to is a leaf; one cabled to leaves, a spine; the rest, core.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from clockfabric.errors import ClockfabricError
from clockfabric.topology.load import DEFAULT_HOST_POOL, parse
from clockfabric.topology.model import Port, Topology
from clockfabric.topology.switch_table import SwitchTable


@dataclass(frozen=True)
class Heard:
    node: str  # the node whose agent heard it
    device: str  # on this interface
    neighbour: str  # "node:port" as LLDP announced it; "" where nothing is heard


def natural(text: str) -> tuple:
    """h2 before h10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def assemble(nodes: dict[str, dict], heard: list[Heard], name: str = "discovered") -> Topology:
    """The topology `heard` describes; `nodes` maps each pushing node to its agent's info
    (address, role). Raises ClockfabricError naming each contradiction."""
    links, problems = _links(heard)
    switches = {n for n, info in nodes.items() if info.get("role") == "switch"}
    switches |= {p.node for pair in links for p in pair if p.node not in nodes}
    hosts = sorted((n for n in nodes if n not in switches), key=natural)
    nics = {h: sorted({p.iface for pair in links for p in pair if p.node == h}, key=natural) for h in hosts}
    problems += [f"host {h}: no LLDP neighbour heard on any NIC; is its agent's lldp service on, and the host cabled?"
                 for h in hosts if not nics[h]]
    if problems:
        raise ClockfabricError("discover: " + "\n".join(problems))
    plane_of = _planes(switches, links, nics)
    leaves = {p.node for pair in links for p in pair if p.node in switches and any(q.node in nics for q in pair)}
    spines = {p.node for pair in links for p in pair
              if p.node in switches - leaves and any(q.node in leaves for q in pair)}
    data = {
        "name": name,
        "meta": {"generator": "discover"},
        "addressing": {"hosts": str(_host_pool([nodes[h].get("address") for h in hosts]))},
        "hosts": [_host(h, nodes[h], [(n, plane_of[h, n]) for n in nics[h]]) for h in hosts],
        "switches": [{"name": s, "role": "leaf" if s in leaves else "spine" if s in spines else "core",
                      "plane": plane_of[s, ""]} for s in sorted(switches, key=natural)],
        "links": [{"a": str(a), "b": str(b)} for a, b in sorted(
            (tuple(sorted(pair, key=lambda p: (p.node in switches, natural(str(p))))) for pair in links),
            key=lambda ab: (ab[0].node in switches, plane_of[_plane_key(ab[0], switches)],
                            natural(str(ab[0]))))],
    }
    return parse(data, "discovered fleet")


def _links(heard: list[Heard]) -> tuple[set[frozenset[Port]], list[str]]:
    """Each cable once, from either end's hearing; a port heard at two far ends is a contradiction."""
    links: set[frozenset[Port]] = set()
    problems = []
    for h in heard:
        if not h.neighbour:
            continue
        try:
            far = Port.parse(h.neighbour)
        except ValueError:
            problems.append(f"{h.node}:{h.device} heard {h.neighbour!r}, which is not NODE:PORT")
            continue
        links.add(frozenset((Port(h.node, h.device), far)))
    ends: dict[Port, list[Port]] = {}
    for pair in links:
        a, b = sorted(pair)
        ends.setdefault(a, []).append(b)
        ends.setdefault(b, []).append(a)
    problems += [f"{port} is heard cabled to {' and to '.join(map(str, sorted(fars)))}; one port takes one cable "
                 "(a cable moved since? discover again once LLDP settles)"
                 for port, fars in sorted(ends.items()) if len(fars) > 1]
    return links, problems


def _planes(switches: set[str], links: set[frozenset[Port]], nics: dict[str, list[str]]) -> dict[tuple[str, str], int]:
    """(switch, "") and (host, nic) -> plane: connected switch fabrics, in the order of the NICs cabled to them."""
    parent = {s: s for s in switches}

    def root(s: str) -> str:
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    attached: dict[tuple[str, str], str] = {}
    for pair in links:
        a, b = sorted(pair)
        if a.node in switches and b.node in switches:
            parent[root(a.node)] = root(b.node)
        for here, there in ((a, b), (b, a)):
            if here.node in nics and there.node in switches:
                attached[here.node, here.iface] = there.node
    order = sorted({root(s) for s in switches}, key=lambda r: min(
        [(natural(nic), natural(h)) for (h, nic), s in attached.items() if root(s) == r] or [((), natural(r))]))
    number = {r: i for i, r in enumerate(order)}
    out = {(s, ""): number[root(s)] for s in switches}
    out |= {(h, nic): number[root(s)] for (h, nic), s in attached.items()}
    return out


def _plane_key(port: Port, switches: set[str]) -> tuple[str, str]:
    return (port.node, "") if port.node in switches else (port.node, port.iface)


def _host(name: str, info: dict, nics: list[tuple[str, int]]) -> dict:
    out: dict = {"name": name}
    address = info.get("address")
    if address:
        out["address6" if ipaddress.ip_address(address).version == 6 else "address"] = address
    out["nics"] = [{"name": n, "plane": p} for n, p in nics]
    return out


def _host_pool(addresses: list[str | None]) -> ipaddress.IPv4Network:
    """The default pool if it holds every IPv4 host address, else the smallest prefix that does."""
    v4 = [a for a in (ipaddress.ip_address(x) for x in addresses if x) if isinstance(a, ipaddress.IPv4Address)]
    pool = ipaddress.IPv4Network(DEFAULT_HOST_POOL)
    if all(a in pool for a in v4):
        return pool
    low, high = int(min(v4)), int(max(v4))
    prefix = 32 - (low ^ high).bit_length()
    return ipaddress.IPv4Network((low, min(prefix, 30)), strict=False)


def heard_from_samples(rows: list[dict]) -> list[Heard]:
    """Each interface's newest `lldp_neighbour` sample ({host, t_ns, labels: {device, neighbour}}):
    a newer one with no neighbour withdraws an older one."""
    newest: dict[tuple[str, str], dict] = {}
    for r in rows:
        key = (r["host"], r["labels"].get("device", ""))
        if key not in newest or r["t_ns"] > newest[key]["t_ns"]:
            newest[key] = r
    return [Heard(host, device, r["labels"].get("neighbour", "")) for (host, device), r in sorted(newest.items())]


def with_switches(nodes: dict[str, dict], heard: list[Heard],
                  tables: dict[str, SwitchTable]) -> tuple[dict[str, dict], list[Heard], list[str]]:
    """The hosts' hearing and the switches' own tables (by the name each was read as) together: each
    switch read is a node, named as its neighbours hear it (its own LLDP system name, where its table
    says it), and each row of its table is heard at its port. A neighbour that neither pushes, nor
    was read, nor says it bridges or routes (a host not admitted yet, say) is left out: it would be
    taken for a switch. Returns the nodes, the hearing, and a line for each thing left out."""
    nodes, heard, notes = dict(nodes), list(heard), []
    named = {given: table.system or given for given, table in tables.items()}
    for given, name in sorted(named.items()):
        if name != given:
            notes.append(f"switch {given} calls itself {name} by LLDP: named {name}, as its neighbours hear it")
    read = set(named.values())
    for given, table in sorted(tables.items()):
        name = named[given]
        notes += [f"switch {name}: {line}" for line in table.left_out]
        if not table.neighbours:
            notes.append(f"switch {name}: its LLDP table has no neighbour; left out")
            continue
        nodes[name] = {**nodes.get(name, {}), "role": "switch"}
        for n in table.neighbours:
            if n.node not in nodes and n.node not in read and n.switch is not True:
                notes.append(f"{name}:{n.port} hears {n.node}:{n.node_port}, which does not push (not "
                             "approved yet, or no agent) and is no switch read: left out")
                continue
            heard.append(Heard(name, n.port, f"{n.node}:{n.node_port}"))
    return nodes, heard, notes
