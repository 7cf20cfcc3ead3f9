"""The fabric as the map draws it: the controller's topology, each link with its state from
what the agents at both ends last pushed (link_up samples, link events), as JSON text.

At thousands of hosts most of the answer is what the topology fixes (nodes, each link's name,
ends, plane and rate): that is written once per topology, and each request writes only each
link's state into it. Nothing that changes is kept between requests.
"""

from __future__ import annotations

import json
from collections import Counter

from clockfabric.controller.series.read import Series
from clockfabric.controller.storage.base import Storage
from clockfabric.topology import Topology

FLAP_WINDOW_NS = 60 * 10**9
FLAP_TRANSITIONS = 3  # downs and ups at one end within the window: flapping
LINK_EVENTS = ("link_down", "link_up")
MAX_RECENT_EVENTS = 5000
End = tuple[str, str]  # node, interface
Drawing = tuple[str, list[tuple[str, End, End]]]  # the JSON before the links; each link's opening JSON, its ends
_drawn: list[tuple[Topology, Drawing]] = []  # the last topology drawn (a controller has one), and its drawing


_compact = json.JSONEncoder(separators=(",", ":")).encode


def _drawing(topology: Topology) -> Drawing:
    if _drawn and _drawn[0][0] is topology:
        return _drawn[0][1]
    nodes = [{"name": h, "kind": "host", "role": "host", "planes": sorted({n.plane for n in host.nics})}
             for h, host in sorted(topology.hosts.items())]
    nodes += [{"name": s, "kind": "switch", "role": sw.role, "planes": [sw.plane]}
              for s, sw in sorted(topology.switches.items())]
    head = _compact({"name": topology.name, "planes": topology.planes, "nodes": nodes})[:-1]
    links = [(_compact({"name": lk.name, "a": str(lk.a), "b": str(lk.b), "plane": topology.plane_of(lk.a),
                        "rate_bps": lk.rate_bps})[:-1], (lk.a.node, lk.a.iface), (lk.b.node, lk.b.iface))
             for lk in topology.links]
    _drawn[:] = [(topology, (head, links))]
    return head, links


def fabric_json(topology: Topology, storage: Storage, series: Series, now_ns: int) -> str:
    """{name, planes, nodes: [{name, kind, role, planes}], links: [{name, a, b, plane, rate_bps, state,
    transitions}]}: state "up", "down", "flapping", or "unknown" where neither end has reported.

    An end's state is its newest word: its latest link_up sample, or a link event after it. The
    event is in storage the moment its push is; the sample shows in the series engine a second
    or two later (the engine buffers what it takes before queries see it), and a link set down
    must be red at once. Events and samples carry the agent's own times."""
    up = {(host, labels.get("device", "")): bool(value) for host, labels, value in series.latest_values("link_up")}
    events = [e for e in storage.events(since_ns=now_ns - FLAP_WINDOW_NS, limit=MAX_RECENT_EVENTS)
              if e.kind in LINK_EVENTS]
    recent: Counter[End] = Counter((e.host, e.device) for e in events)
    if events:  # an end's newest word is an event only where no sample of it is newer: their times, then
        said: dict[End, int] = {}
        for s in series.latest("link_up", hosts=sorted({e.host for e in events})):
            end = (s.host, s.labels.get("device", ""))
            said[end], up[end] = s.t_ns, bool(s.value)
        for e in events:
            end = (e.host, e.device)
            if e.t_ns > said.get(end, -1):
                said[end], up[end] = e.t_ns, e.kind == "link_up"
    head, drawn = _drawing(topology)
    links = []
    for opening, a, b in drawn:
        transitions = max(recent[a], recent[b])
        links.append(f'{opening},"state":"{_state(up.get(a), up.get(b), transitions)}","transitions":{transitions}}}')
    return f'{head},"links":[{",".join(links)}]}}'


def _state(a_up: bool | None, b_up: bool | None, transitions: int) -> str:
    known = [s for s in (a_up, b_up) if s is not None]
    if not known:
        return "unknown"
    if not all(known):
        return "down"
    return "flapping" if transitions >= FLAP_TRANSITIONS else "up"
