"""The fabric as the map draws it: the controller's topology, each link with its state from
what the agents at both ends last pushed (link_up samples, link events)."""

from __future__ import annotations

from collections import Counter

from clockfabric.controller.storage.base import Storage
from clockfabric.topology import Topology

FLAP_WINDOW_NS = 60 * 10**9
FLAP_TRANSITIONS = 3  # downs and ups at one end within the window: flapping
LINK_EVENTS = ("link_down", "link_up")
MAX_RECENT_EVENTS = 5000


Drawing = tuple[list[dict], list[tuple[dict, tuple, tuple]]]
_drawn: list[tuple[Topology, Drawing]] = []  # the last topology drawn (a controller has one), and its drawing


def _drawing(topology: Topology) -> Drawing:
    """What of the map a topology fixes (its nodes; each link with its two ends), worked out once per
    topology object: at thousands of hosts it is most of a request's work, and it never changes."""
    if _drawn and _drawn[0][0] is topology:
        return _drawn[0][1]
    nodes = [{"name": h, "kind": "host", "role": "host", "planes": sorted({n.plane for n in host.nics})}
             for h, host in sorted(topology.hosts.items())]
    nodes += [{"name": s, "kind": "switch", "role": sw.role, "planes": [sw.plane]}
              for s, sw in sorted(topology.switches.items())]
    links = [({"name": lk.name, "a": str(lk.a), "b": str(lk.b), "plane": topology.plane_of(lk.a),
               "rate_bps": lk.rate_bps}, (lk.a.node, lk.a.iface), (lk.b.node, lk.b.iface)) for lk in topology.links]
    _drawn[:] = [(topology, (nodes, links))]
    return nodes, links


def fabric(topology: Topology, storage: Storage, now_ns: int) -> dict:
    """Nodes (hosts, switches with role and plane) and links (ends, plane, rate, state:
    "up", "down", "flapping" or "unknown" where neither end has reported)."""
    up = {(s.host, s.labels.get("device", "")): bool(s.value) for s in storage.latest_samples("link_up")}
    recent = Counter((e.host, e.device) for e in storage.events(since_ns=now_ns - FLAP_WINDOW_NS,
                                                                 limit=MAX_RECENT_EVENTS) if e.kind in LINK_EVENTS)
    nodes, drawn = _drawing(topology)
    links = []
    for static, a, b in drawn:
        known = [up[e] for e in (a, b) if e in up]
        transitions = max(recent[a], recent[b])
        if not known:
            state = "unknown"
        elif not all(known):
            state = "down"
        elif transitions >= FLAP_TRANSITIONS:
            state = "flapping"
        else:
            state = "up"
        links.append({**static, "state": state, "transitions": transitions})
    return {"name": topology.name, "planes": topology.planes, "nodes": nodes, "links": links}
