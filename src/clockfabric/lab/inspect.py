"""What a lab looks like right now, read from the kernel, not from what we meant to build."""

from __future__ import annotations

import time

from clockfabric.lab import netns, shaping
from clockfabric.lab.state import Lab, lab_namespaces
from clockfabric.topology import Topology, format_rate

IFF_UP, IFF_LOWER_UP = 0x1, 0x10000


def port_states(lab: Lab) -> dict[tuple[str, str], dict]:
    """(node, iface) -> operstate, admin state, carrier changes, rate and traffic classes in force."""
    out = {}
    for node in lab.topology.nodes():
        if not netns.exists(lab.ns(node)):
            continue
        with netns.ipr(lab.ns(node)) as ipr:
            for link in ipr.get_links():
                name = link.get("ifname")
                if name == "lo":
                    continue
                out[(node, name)] = {
                    "oper": link.get("operstate", "UNKNOWN").lower(),  # via linkwatch: can lag ~1 s
                    "admin_up": bool(link["flags"] & IFF_UP),
                    "carrier": bool(link["flags"] & IFF_LOWER_UP),  # immediate
                    "carrier_changes": link.get("carrier_changes"),
                    "rate": shaping.read_rate(ipr, link["index"]),
                    "classes": shaping.read_classes(ipr, link["index"]),
                }
    return out


def _classes(topo: Topology) -> list[dict] | None:
    """The traffic classes every port was built with (None: one FIFO per port)."""
    if topo.classes is None:
        return None
    return [{"name": c.name, "dscp": list(c.dscp) or "every other", "percent": c.percent,
             "limit": "cap" if c.name == "priority" else "guaranteed"} for c in topo.classes.classes()]


def lab_status(lab: Lab) -> dict:
    topo = lab.topology
    ports = port_states(lab)
    marker = lab.dir / "up"
    links = []
    silent = lab.silent_links()
    for i, lk in enumerate(topo.links):
        a, b = ports.get((lk.a.node, lk.a.iface), {}), ports.get((lk.b.node, lk.b.iface), {})
        state = "up" if all(p.get("admin_up") and p.get("carrier") for p in (a, b)) else "down"
        state = "down (silent)" if i in silent else state
        rates = {r for r in (a.get("rate"), b.get("rate")) if r}
        links.append({"a": str(lk.a), "b": str(lk.b), "state": state,
                      "rate": format_rate(min(rates)) if rates else None,
                      "rate_configured": format_rate(lk.rate_bps),
                      # per end, as the kernel has them: [] is one FIFO
                      "classes": {str(port): p.get("classes", []) for port, p in ((lk.a, a), (lk.b, b))},
                      "carrier_changes": max(a.get("carrier_changes") or 0, b.get("carrier_changes") or 0)})
    namespaces = lab_namespaces(lab.name)
    return {
        "name": lab.name,
        "state": "up" if marker.exists() and len(namespaces) == len(topo.nodes()) else "incomplete",
        "up_since": int(marker.read_text()) / 1e9 if marker.exists() else None,
        "age_s": round(time.time() - int(marker.read_text()) / 1e9, 1) if marker.exists() else None,
        "topology": topo.name,
        "hosts": {h.name: {"address": str(h.address), "nics": {n.name: n.plane for n in h.nics}}
                  for h in topo.hosts.values()},
        "switches": {s.name: {"role": s.role, "plane": s.plane} for s in topo.switches.values()},
        "classes": _classes(topo),
        "namespaces": len(namespaces),
        "links": links,
        "links_down": sum(1 for lk in links if lk["state"] != "up"),
        "processes": lab.processes(),
        "state_dir": str(lab.dir),
    }

