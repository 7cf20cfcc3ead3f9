"""The fabric as the map draws it: the controller's topology, each link with its state from
what the agents at both ends last pushed (link_up samples, link events)."""

from __future__ import annotations

from collections import Counter

from clockfabric.controller.storage.base import Storage
from clockfabric.topology import Topology

FLAP_WINDOW_NS = 60 * 10**9
FLAP_TRANSITIONS = 3  # downs and ups at one end within the window: flapping
LINK_EVENTS = ("link_down", "link_up")


def fabric(topology: Topology, storage: Storage, now_ns: int) -> dict:
    """Nodes (hosts, switches with role and plane) and links (ends, plane, rate, state:
    "up", "down", "flapping" or "unknown" where neither end has reported)."""
    up = {(s.host, s.labels.get("device", "")): bool(s.value) for s in storage.latest_samples("link_up")}
    recent: Counter[tuple[str, str]] = Counter()
    for kind in LINK_EVENTS:
        for e in storage.events(since_ns=now_ns - FLAP_WINDOW_NS, kind=kind, limit=5000):
            recent[(e.host, e.device)] += 1
    links = []
    for lk in topology.links:
        ends = [(lk.a.node, lk.a.iface), (lk.b.node, lk.b.iface)]
        known = [up[e] for e in ends if e in up]
        if not known:
            state = "unknown"
        elif not all(known):
            state = "down"
        elif max(recent[e] for e in ends) >= FLAP_TRANSITIONS:
            state = "flapping"
        else:
            state = "up"
        links.append({"name": lk.name, "a": str(lk.a), "b": str(lk.b), "plane": topology.plane_of(lk.a),
                      "rate_bps": lk.rate_bps, "state": state, "transitions": max(recent[e] for e in ends)})
    nodes = [{"name": h, "kind": "host", "role": "host", "planes": sorted({n.plane for n in host.nics})}
             for h, host in sorted(topology.hosts.items())]
    nodes += [{"name": s, "kind": "switch", "role": sw.role, "planes": [sw.plane]}
              for s, sw in sorted(topology.switches.items())]
    return {"name": topology.name, "planes": topology.planes, "nodes": nodes, "links": links}

