"""Which switch each of the agent's probe paths crosses, learned by tracing the probes' own 5-tuples.

The probe engine sends to peer:P from a port of its own on each rail, and the fabric hashes
that 5-tuple onto one spine. To name the link that congested paths share, the controller
must know which. A UDP packet with the same 5-tuple and TTL 2 is answered by exactly that
spine (probe.paths.trace). Peers behind the host's own leaf have one path: they are not
traced (the packet would reach the peer). A path with no answer is reported with no switch,
which says only what every path to that peer shares.

Learned at start, again every `every_s` (a fabric that changed elsewhere moves the hash),
and at once when one of the host's links changes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from clockfabric.errors import ClockfabricError
from clockfabric.probe.paths import trace
from clockfabric.topology import Topology, interfaces

log = logging.getLogger(__name__)
TTL = 2  # the hop after the leaf: a spine

Row = tuple[str, str, int, str | None]  # (peer, path label, plane, the switch at TTL, or None)


class PathMapper(threading.Thread):
    def __init__(self, topology: Topology, host: str, peers: list[str],
                 flows: list[tuple[str, str | None, int, int]], *, every_s: float = 60.0,
                 on_change: Callable[[], None] = lambda: None, trace_fn: Callable[..., dict] = trace):
        """`flows`: the engine's (label, rail, source port, peer's port), as ProbeEngine.flows."""
        super().__init__(name="path-map", daemon=True)
        self.topology, self.host, self.peers, self.flows = topology, host, peers, flows
        self.every_s = every_s
        self.on_change = on_change
        self._trace = trace_fn
        self.address = str(topology.hosts[host].address)
        self._owner = {str(i.address.ip): i.port.node for i in interfaces(topology).values()}
        self._leaf = first_switches(topology)
        self.rows: list[Row] = []  # the latest map, replaced whole: safe to read from other threads
        self.traces = 0
        self._wake = threading.Event()
        self._stopping = threading.Event()

    def wake(self) -> None:
        """A link of this host changed: learn again now."""
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                rows = self.learn()
            except ClockfabricError as e:  # no raw sockets (not root): no map, said once
                log.warning("no path map for the controller: %s", e)
                return
            if rows != self.rows:
                self.rows = rows
                self.on_change()
            self._wake.wait(self.every_s)
            self._wake.clear()

    def learn(self) -> list[Row]:
        rows: list[Row] = []
        failures: list[ClockfabricError] = []
        self.traces = 0
        topo = self.topology
        for rail, plane in ((n.name, n.plane) for n in topo.hosts[self.host].nics):
            flows = [(label, sport, dport) for label, r, sport, dport in self.flows if r == rail]
            for peer in self.peers:
                if topo.hosts[peer].nic(plane) is None:
                    continue
                if self._leaf.get((peer, plane)) == self._leaf.get((self.host, plane)):  # one path, no spine
                    rows += [(peer, label, plane, None) for label, _, _ in flows]
                    continue
                if self._stopping.is_set():
                    return rows
                try:
                    found = self._trace(self.address, str(topo.hosts[peer].address),
                                        [(sport, dport) for _, sport, dport in flows], proto="udp", ttl=TTL,
                                        device=rail)  # as the engine's sockets are bound
                except ClockfabricError as e:  # no route to this peer now: its paths say no switch
                    failures.append(e)
                    found = {}
                self.traces += 1
                rows += [(peer, label, plane, self._switch(found.get((sport, dport))))
                         for label, sport, dport in flows]
        if failures and len(failures) == self.traces:  # not one trace went out: raw sockets refused, say
            raise failures[0]
        return rows

    def _switch(self, hop: str | None) -> str | None:
        return None if hop is None else self._owner.get(hop, hop)


def first_switches(topo: Topology) -> dict[tuple[str, int], str]:
    """(host, plane) -> the switch its NIC on that plane is cabled to."""
    out = {}
    for link in topo.links:
        for end, far in ((link.a, link.b), (link.b, link.a)):
            if end.node in topo.hosts and far.node in topo.switches:
                out[(end.node, topo.plane_of(end))] = far.node
    return out
