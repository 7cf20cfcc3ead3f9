"""Which switch each flow crosses: its own 5-tuple traced as the probe paths are.

The fabric hashes a flow's 5-tuple onto one spine; a TCP SYN with the same 5-tuple and TTL 2
is answered by exactly that spine (probe.paths.trace). The SYN leaves by the NIC the kernel
routes the flow on (traffic's RouteLookup, ports included), as the flow's own packets do.

A 5-tuple hashes the same way while the fabric stands, so a trace is cached per 5-tuple (a
reused port included) and made again every `every_s` (one left unanswered: after RETRY_S), or
at once after `forget()` (a link of the host changed). A link between switches going down or
up moves the hash too, and the host does not see it: hence a short `every_s` (one SYN per flow
each time). Not traced: flows
to a peer under one of this host's own leaves (no spine between them; the SYN would reach
the peer's socket) and flows to addresses outside the fabric. Traces run on a thread of
their own: a lost answer waits up to a second, which the agent's update must not.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable

from clockfabric.errors import ClockfabricError
from clockfabric.probe.paths import trace
from clockfabric.topology import Topology, interfaces
from clockfabric.traffic.steer_decide import FlowKey
from clockfabric.traffic.steer_kernel import RouteLookup

log = logging.getLogger(__name__)
TTL = 2  # the hop after the leaf: a spine
EVERY_S = 10.0  # a fabric link's change, which the host does not see, shows within this long
RETRY_S = 2.0  # an unanswered trace (its SYN or the answer lost) again


def leaves(topo: Topology) -> dict[str, set[str]]:
    """Host -> the switches its NICs are cabled to."""
    out: dict[str, set[str]] = {}
    for link in topo.links:
        for end, far in ((link.a, link.b), (link.b, link.a)):
            if end.node in topo.hosts and far.node in topo.switches:
                out.setdefault(end.node, set()).add(far.node)
    return out


class FlowPaths:
    """Flow -> the switch at TTL 2 (None: not traced, or nothing answered)."""

    def __init__(self, topology: Topology, host: str, *, every_s: float = EVERY_S,
                 trace_fn: Callable[..., dict] = trace, device_of: Callable[[FlowKey], str | None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.host, self.every_s, self._trace, self._clock = host, every_s, trace_fn, clock
        self._device_of = device_of
        self.owner = {str(i.address.ip): i.port.node for i in interfaces(topology).values()}
        self.owner |= {str(h.address): name for name, h in topology.hosts.items()}
        leaf = leaves(topology)
        self.far = {h for h in topology.hosts if h != host and not leaf.get(h, set()) & leaf.get(host, set())}
        self.found: dict[FlowKey, tuple[float, str | None]] = {}  # replaced whole: read from any thread
        self.traces = 0
        self.missed: set[FlowKey] = set()  # flows whose last trace went unanswered: logged once each

    def traced(self, key: FlowKey) -> bool:
        """Whether the flow crosses a spine this host can trace."""
        return self.owner.get(key.remote) in self.far

    def via(self, key: FlowKey) -> str | None:
        found = self.found.get(key)
        return found[1] if found else None

    def due(self, keys: Iterable[FlowKey]) -> list[FlowKey]:
        now = self._clock()
        return [k for k in keys if self.traced(k) and ((f := self.found.get(k)) is None or now - f[0] > self.every_s)]

    def learn(self, keys: Iterable[FlowKey]) -> None:
        """Trace the flows due among `keys` (each pair of ends at once); forget flows not among them."""
        keys = list(dict.fromkeys(keys))
        live = set(keys)
        found = {k: v for k, v in self.found.items() if k in live}
        groups: dict[tuple[str, str, str | None], list[FlowKey]] = {}
        for k in self.due(keys):
            groups.setdefault((k.local, k.remote, self._device(k)), []).append(k)
        for (local, remote, device), flows in groups.items():
            try:
                hops = self._trace(local, remote, [(k.lport, k.rport) for k in flows], proto="tcp", ttl=TTL,
                                   device=device)
            except ClockfabricError as e:  # no route now, or no raw sockets: not known, tried again later
                for k in flows:
                    self._note(k, str(e))
                continue
            self.traces += 1
            now = self._clock()
            for k in flows:
                hop = hops.get((k.lport, k.rport))
                # unanswered: held as if traced long ago, so it is due again after RETRY_S
                found[k] = (now, self.owner.get(hop, hop)) if hop else (now - self.every_s + RETRY_S, None)
                self._note(k, None if hop else f"nothing answered at TTL {TTL} out of {device or 'the routed NIC'}")
        self.found = found
        self.missed &= live

    def _note(self, key: FlowKey, missed: str | None) -> None:
        """Log why a flow's trace failed (`missed`; None: it was answered), once until it is answered."""
        if missed is None:
            self.missed.discard(key)
        elif key not in self.missed:
            self.missed.add(key)
            log.info("flow %s:%d -> %s:%d not traced (tried again later): %s", key.local, key.lport, key.remote,
                     key.rport, missed)

    def forget(self) -> None:
        self.found = {}

    def _device(self, key: FlowKey) -> str | None:
        return self._device_of(key) if self._device_of else None


class KernelDevice:
    """The NIC the kernel routes a flow out of (None where it cannot say)."""

    def __init__(self) -> None:
        self.routes = RouteLookup()

    def __call__(self, key: FlowKey) -> str | None:
        try:
            oif = self.routes.oif(key)
            return socket.if_indextoname(oif) if oif else None
        except OSError:
            return None

    def close(self) -> None:
        self.routes.close()


class PathTracer(threading.Thread):
    """FlowPaths on a thread: `want(keys)` each update, `paths.via(key)` any time."""

    def __init__(self, paths: FlowPaths, every_s: float = 1.0):
        super().__init__(name="flow-paths", daemon=True)
        self.paths, self.every_s = paths, every_s
        self._keys: list[FlowKey] = []
        self.cpu_s = 0.0  # this thread's CPU time tracing
        self._wake, self._stopping = threading.Event(), threading.Event()

    def want(self, keys: Iterable[FlowKey]) -> None:
        self._keys = list(keys)
        if self.paths.due(self._keys):
            self._wake.set()

    def forget(self) -> None:
        self.paths.forget()
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.every_s)
            self._wake.clear()
            if not self._stopping.is_set():
                start = time.thread_time()
                self.paths.learn(self._keys)
                self.cpu_s += time.thread_time() - start
