"""Transparent mode: move an unmodified job's TCP flows off a congested plane, one flow at a time.

Failover (failover.py) moves *all* traffic to a peer off a *failed* plane. Steering is the same
lever per *flow* and for *congestion*: when the plane a flow hashed onto is congested toward its
peer and another plane is quiet, a policy-routing rule that matches exactly that flow (source and
destination address, TCP, both ports) sends it through a table that reaches the peer over the
quiet plane. The connection is bound to the host's stable address, so it carries on: the kernel
re-routes the socket on its next packet.

Each host steers only what it *sends*, from its own readings, and the peer likewise: no flow
table crosses the wire, and each direction of a connection may take a different plane. A
connection that mostly receives still sends its ACKs, and ACKs queued behind other traffic
slow the data coming the other way; so a flow is a candidate when it sends *or* receives at a
good rate.

The pieces: steer_decide.py decides (pure), steer_kernel.py reads flows and programs rules,
and `Steering` here runs the two as the failover thread asks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from clockfabric.traffic.steer_decide import (
    DelayBook,
    Flow,
    FlowRates,
    Move,
    Steerer,
    SteerPolicy,
    decode_queue,
    encode_queue,
)
from clockfabric.traffic.steer_kernel import FlowReader, FlowRules, RouteLookup

__all__ = ["DelayBook", "FlowReader", "Move", "SteerPolicy", "Steering", "decode_queue", "encode_queue"]

log = logging.getLogger(__name__)


class Steering:
    """Reads the flows, asks the Steerer, programs the rules; returns what it did, for the record."""

    def __init__(self, address: str, peers: dict[str, str], nics: dict[int, str],
                 gateways: Callable[[str], dict[int, str]], policy: SteerPolicy = SteerPolicy(), *,
                 rules: FlowRules | None = None, reader: FlowReader | None = None, lookup: RouteLookup | None = None):
        self.address = address
        self.peers = peers
        self.by_address = {a: n for n, a in peers.items()}
        self.rules = rules or FlowRules(address, nics, gateways)
        self.reader = reader or FlowReader()
        self.lookup = lookup or RouteLookup()
        self.plane_of_oif = {i: p for p, i in self.rules.index.items()}
        self.steerer = Steerer(tuple(sorted(nics)), policy)
        self.rates = FlowRates()
        self.next_round = 0.0
        self.counters = {"rule_errors": 0, "flow_read_errors": 0, "rules": 0}
        self.last_flows: list[Flow] = []

    def close(self) -> None:
        for c in (self.rules, self.reader, self.lookup):
            c.close()

    def reconcile(self, t: float) -> list[Move]:
        """Adopt the rules a previous run left for connections that still exist; remove the rest."""
        try:
            live = {s.key for s in self.reader.read()}
        except OSError as e:
            log.warning("steering: cannot read flows (%s); old rules left as they are", e)
            return []
        out = []
        for key, plane, origin in self.rules.installed():
            peer = self.by_address.get(key.remote)
            if key in live and peer is not None and key.local == self.address:
                out.append(self.steerer.adopt(t, key, peer, plane, origin))
            else:
                try:
                    self.rules.remove(key)
                except OSError as e:
                    log.warning("steering: %s", e)
        return out

    def _plane_of(self, f: Flow) -> int | None:
        try:
            return self.plane_of_oif.get(self.lookup.oif(f.key))
        except OSError:
            return None

    def flows(self, t: float) -> list[Flow] | None:
        try:
            samples = [s for s in self.reader.read()
                       if s.key.local == self.address and s.key.remote in self.by_address]
        except OSError as e:
            self.counters["flow_read_errors"] += 1
            log.debug("steering: reading flows: %s", e)
            return None
        rates = self.rates.update(t, samples)
        return [Flow(s.key, self.by_address[s.key.remote], rates.get(s.key, 0.0), s.backlog_bytes) for s in samples]

    def tick(self, t: float, queues: dict[str, dict[int, float | None]], usable: dict[str, tuple[int, ...]]
             ) -> list[Move]:
        """Every call: flows on a plane no longer usable go back. Every `interval_s`: a full round."""
        if t < self.next_round:
            moves = self.steerer.failed(t, usable)
        else:
            self.next_round = t + self.steerer.policy.interval_s
            flows = self.flows(t)
            if flows is not None:
                self.last_flows = flows
            moves = self.steerer.observe(t, queues, flows, usable, self._plane_of)
        done = []
        for m in moves:
            try:
                if m.plane is None:
                    self.rules.remove(m.flow)
                else:
                    self.rules.add(m.flow, m.plane, m.origin)
            except OSError as e:
                self.counters["rule_errors"] += 1
                log.warning("steering: %s", e)
                if m.plane is not None:  # the rule did not take: the flow stays where it was
                    self.steerer.steered.pop(m.flow, None)
                continue
            done.append(m)
        self.counters["rules"] = len(self.steerer.steered)
        return done

    def state(self) -> dict:
        s = self.steerer
        loads: dict[str, dict[str, float | None]] = {}
        for (peer, plane), load in sorted(s.loads.items()):
            loads.setdefault(peer, {})[str(plane)] = None if load.queue_s is None else round(load.queue_s * 1e3, 2)
        return {"steered": [{"flow": str(k), "peer": st.peer, "plane": st.plane, "origin": st.origin}
                            for k, st in sorted(s.steered.items())],
                "queues_ms": loads,
                "congested": sorted(f"{peer}/{plane}" for (peer, plane), ld in s.loads.items() if ld.congested),
                "counters": s.counters | self.counters}
