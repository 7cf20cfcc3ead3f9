"""The topology model every layer shares: hosts with NICs on planes, switches, links, paths.

Vocabulary (Mininet's): a *node* is a host or a switch; a *port* is one end of a link,
named node:interface. A *plane* (or rail) is one independent fabric: NIC r of each host
attaches to plane r, and a packet never crosses from one plane to another.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from functools import cached_property
from itertools import pairwise
from typing import TYPE_CHECKING

from clockfabric.errors import ClockfabricError
from clockfabric.topology.classes import TrafficClasses

if TYPE_CHECKING:
    import networkx as nx

SWITCH_ROLES = ("leaf", "spine", "core")


@dataclass(frozen=True, order=True)
class Port:
    node: str
    iface: str

    def __str__(self) -> str:
        return f"{self.node}:{self.iface}"

    @classmethod
    def parse(cls, text: str) -> Port:
        """'h3:eth0' -> Port('h3', 'eth0')."""
        node, sep, iface = text.partition(":")
        if not (node and sep and iface):
            raise ValueError(f"{text!r} is not NODE:IFACE")
        return cls(node, iface)


@dataclass(frozen=True)
class Nic:
    name: str
    plane: int = 0
    address: ipaddress.IPv4Interface | None = None  # given by the file; None: the address plan's
    address6: ipaddress.IPv6Interface | None = None


@dataclass(frozen=True)
class Host:
    name: str
    address: ipaddress.IPv4Address  # stable host address, reachable over every plane
    nics: tuple[Nic, ...]
    address6: ipaddress.IPv6Address | None = None

    def nic(self, plane: int) -> Nic | None:
        return next((n for n in self.nics if n.plane == plane), None)

    def nic_on(self, plane: int) -> Nic:
        """The NIC on plane, for callers that need one: its absence is the caller's input error."""
        if (nic := self.nic(plane)) is None:
            raise ClockfabricError(f"host {self.name} has no NIC on plane {plane}")
        return nic


@dataclass(frozen=True)
class Switch:
    name: str
    role: str
    plane: int = 0


@dataclass(frozen=True)
class Link:
    a: Port
    b: Port
    rate_bps: int
    buffer_pkts: int

    @property
    def name(self) -> str:
        return f"{self.a}--{self.b}"

    def other(self, node: str) -> Port:
        return self.b if self.a.node == node else self.a

    def port(self, node: str) -> Port:
        return self.a if self.a.node == node else self.b


@dataclass(frozen=True)
class Path:
    """One shortest path from host to host inside one plane, as node names."""

    plane: int
    nodes: tuple[str, ...]

    @property
    def switches(self) -> tuple[str, ...]:
        return self.nodes[1:-1]


@dataclass
class Topology:
    name: str
    hosts: dict[str, Host]
    switches: dict[str, Switch]
    links: list[Link]
    host_pool: ipaddress.IPv4Network
    fabric_pool: ipaddress.IPv4Network
    default_rate_bps: int
    default_buffer_pkts: int
    meta: dict = field(default_factory=dict)  # generator and its arguments, kept for people
    mtu: int = 1500  # every cable's, in bytes of IP packet: AI back-end fabrics run jumbo frames (9000)
    classes: TrafficClasses | None = None  # every port's traffic classes; None: one FIFO per port

    # ---- lookups -------------------------------------------------------------------------
    def nodes(self) -> list[str]:
        return [*self.hosts, *self.switches]

    def plane_of(self, port: Port) -> int:
        if port.node in self.switches:
            return self.switches[port.node].plane
        return next(n.plane for n in self.hosts[port.node].nics if n.name == port.iface)

    @cached_property
    def planes(self) -> list[int]:
        return sorted({n.plane for h in self.hosts.values() for n in h.nics})

    def links_of(self, node: str) -> list[Link]:
        return [lk for lk in self.links if node in (lk.a.node, lk.b.node)]

    def port_rates(self, node: str) -> dict[str, int]:
        """Each of the node's interfaces: the rate of its link, bits per second."""
        return {(lk.a if lk.a.node == node else lk.b).iface: lk.rate_bps for lk in self.links_of(node)}

    def find_link(self, a: str, b: str) -> Link:
        """The link between a and b, each a node or node:iface. Raises KeyError if none or several."""

        def matches(end: str, port: Port) -> bool:
            return end == port.node or end == str(port)

        found = [lk for lk in self.links
                 if (matches(a, lk.a) and matches(b, lk.b)) or (matches(a, lk.b) and matches(b, lk.a))]
        if len(found) != 1:
            raise KeyError(len(found))
        return found[0]

    # ---- graphs and paths ----------------------------------------------------------------
    def plane_graph(self, plane: int) -> nx.MultiGraph:
        """Nodes and links of one plane; edge key is the link's index in self.links. Read-only."""
        import networkx as nx  # here, not at the top: agents load topologies but ask no path questions

        if plane not in self._plane_graphs:
            self._plane_graphs[plane] = nx.freeze(self._build_plane_graph(plane))
        return self._plane_graphs[plane]

    @cached_property
    def _plane_graphs(self) -> dict[int, nx.MultiGraph]:
        return {}

    def _build_plane_graph(self, plane: int) -> nx.MultiGraph:
        import networkx as nx

        g = nx.MultiGraph()
        g.add_nodes_from(s.name for s in self.switches.values() if s.plane == plane)
        g.add_nodes_from(h.name for h in self.hosts.values() if h.nic(plane))
        for i, lk in enumerate(self.links):
            if self.plane_of(lk.a) == plane:
                g.add_edge(lk.a.node, lk.b.node, key=i)
        return g

    def transit_graph(self, plane: int, *ends: str) -> nx.MultiGraph:
        """The plane graph where only switches (and the given end hosts) carry traffic."""
        g = self.plane_graph(plane)
        return g.subgraph(n for n in g if n in self.switches or n in ends)

    def paths(self, src: str, dst: str) -> list[Path]:
        """Every shortest path from host src to host dst, over every plane both are on."""
        import networkx as nx

        out = []
        for plane in self.planes:
            g = self.transit_graph(plane, src, dst)
            if src in g and dst in g and nx.has_path(g, src, dst):
                out += [Path(plane, tuple(p)) for p in sorted(nx.all_shortest_paths(g, src, dst))]
        return out

    def links_through(self, src: str, dst: str, plane: int, hop: str | None = None, at: int = 2) -> list[str]:
        """Names of the links that every shortest src -> dst path on `plane` crosses, of those
        whose node number `at` (a trace's TTL) is `hop` if one is given: what a trace proves
        of the path a flow takes. In order from src; [] if no such path."""
        paths = [p.nodes for p in self.paths(src, dst)
                 if p.plane == plane and (hop is None or (len(p.nodes) > at and p.nodes[at] == hop))]
        if not paths:
            return []
        shared = set.intersection(*({frozenset(step) for step in pairwise(p)} for p in paths))
        names = []
        for step in pairwise(paths[0]):
            if frozenset(step) in shared:
                try:
                    names.append(self.find_link(*step).name)
                except KeyError:  # parallel cables: a trace cannot tell which one
                    pass
        return names
