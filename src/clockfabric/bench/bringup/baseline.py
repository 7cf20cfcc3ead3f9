"""`clockfabric bench lab-bringup`'s baseline: the same lab built the conventional way, one
`ip` / `tc` / `sysctl` process per operation from the same plan, and the check that both labs
are the same (routes, addresses, links, qdiscs) before its times count."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

from clockfabric.lab import build, netns, shaping
from clockfabric.lab.naming import link_alias, netns_name, netns_prefix
from clockfabric.topology import Topology, interfaces, routing_tables


class BenchError(Exception):
    pass


# ---- helpers --------------------------------------------------------------------------------
def sh(argv: list[str]) -> str:
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise BenchError(f"`{' '.join(argv)}` failed: {(p.stderr or p.stdout).strip()}")
    return p.stdout


def fingerprint(lab: str, topo: Topology) -> dict[str, list]:
    """Routes, addresses, links, qdiscs of every node (lab name masked), and h0's htb class."""
    fp: dict[str, list] = {}
    for node in topo.nodes():
        ns = netns_name(lab, node)
        routes = []
        for r in json.loads(sh(["ip", "-j", "-n", ns, "route", "show"]) or "[]"):
            hops = r.get("nexthops") or [{"gateway": r.get("gateway"), "dev": r.get("dev")}]
            routes.append((r["dst"], r.get("prefsrc"), tuple(sorted((h.get("gateway"), h.get("dev")) for h in hops))))
        addrs = [(a["ifname"], i["family"], i["local"], i["prefixlen"])
                 for a in json.loads(sh(["ip", "-j", "-n", ns, "addr", "show"]))
                 for i in a.get("addr_info", [])]
        links = [(ln["ifname"], "UP" in ln.get("flags", []), ln.get("mtu"),
                  (ln.get("ifalias") or "").replace(f"lab={lab} ", "lab=LAB "), ln.get("gso_max_segs"))
                 for ln in json.loads(sh(["ip", "-j", "-d", "-n", ns, "link", "show"]))]
        qdiscs = [(q["dev"], q["kind"], q.get("handle"), q.get("parent", "root"),
                   q.get("options", {}).get("limit"), q.get("options", {}).get("default"))
                  for q in json.loads(sh(["tc", "-j", "-n", ns, "qdisc", "show"]))]
        fp[node] = [sorted(routes), sorted(addrs), sorted(links), sorted(qdiscs)]
    h0 = netns_name(lab, "h0")
    fp["h0-class"] = [sh(["tc", "-n", h0, "class", "show", "dev", "eth0"]).split()]
    return fp


def compare(ours: dict, base: dict, hosts: int) -> None:
    kinds = ("routes", "addresses", "links", "qdiscs")
    bad = []
    for node in ours:
        names = ("htb class",) if node == "h0-class" else kinds
        for kind, a, b in zip(names, ours[node], base.get(node, []), strict=False):
            if a != b:
                only_a = [x for x in a if x not in b][:3]
                only_b = [x for x in b if x not in a][:3]
                bad.append(f"  {node} {kind}: clockfabric only {only_a}; baseline only {only_b}")
    if bad:
        raise BenchError(f"{hosts} hosts: the baseline lab is not equivalent to the clockfabric lab:\n"
                         + "\n".join(bad[:12]))


# ---- the baseline: one process per operation -------------------------------------------------
def baseline_plan(topo: Topology, lab: str) -> list[list[str]]:
    ns = {n: netns_name(lab, n) for n in topo.nodes()}
    ifaces = interfaces(topo)
    cmds: list[list[str]] = []
    for node in topo.nodes():
        sysctls = build.COMMON_SYSCTLS | (build.SWITCH_SYSCTLS if node in topo.switches else {})
        cmds.append(["ip", "netns", "add", ns[node]])
        # one `sysctl -w` per namespace with all its keys (not one per key): a fair baseline
        cmds.append(["ip", "netns", "exec", ns[node], "sysctl", "-qw", *(f"{k}={v}" for k, v in sysctls.items())])
    for h in topo.hosts.values():
        cmds.append(["ip", "-n", ns[h.name], "link", "set", "dev", "lo", "up"])
        cmds.append(["ip", "-n", ns[h.name], "addr", "add", f"{h.address}/32", "dev", "lo"])
    for lk in topo.links:
        cmds.append(["ip", "-n", ns[lk.a.node], "link", "add", lk.a.iface, "gso_max_segs", "1", "mtu", str(topo.mtu),
                     "type", "veth", "peer", "name", lk.b.iface, "netns", ns[lk.b.node], "gso_max_segs", "1",
                     "mtu", str(topo.mtu)])
        params = shaping._class_params(lk.rate_bps, topo.mtu)  # the very numbers clockfabric hands the kernel
        for port in (lk.a, lk.b):
            n, dev = ns[port.node], port.iface
            cmds += [
                ["ip", "-n", n, "link", "set", "dev", dev, "alias", link_alias(lab, lk.name)],
                ["ip", "-n", n, "addr", "add", f"{ifaces[port].address.ip}/31", "dev", dev],
                ["tc", "-n", n, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"],
                ["tc", "-n", n, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
                 "rate", f"{params['rate']}bps", "ceil", f"{params['ceil']}bps", "burst", str(params["burst"]),
                 "cburst", str(params["cburst"]), "quantum", str(params["quantum"])],
                ["tc", "-n", n, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "bfifo",
                 "limit", str(shaping.buffer_bytes(lk.buffer_pkts, topo.mtu))],
                ["ip", "-n", n, "link", "set", "dev", dev, "up"],
            ]
    for node, routes in routing_tables(topo).items():
        for r in routes:
            cmd = ["ip", "-n", ns[node], "route", "replace", str(r.dst)]
            if r.src:
                cmd += ["src", str(r.src)]
            if len(r.nexthops) == 1:
                cmd += ["via", str(r.nexthops[0].gateway), "dev", r.nexthops[0].iface]
            else:
                for hop in r.nexthops:
                    cmd += ["nexthop", "via", str(hop.gateway), "dev", hop.iface]
            cmds.append(cmd)
    return cmds


def baseline_up(topo: Topology, lab: str, tick: Callable[[int, int], None]) -> int:
    cmds = baseline_plan(topo, lab)
    for i, cmd in enumerate(cmds):
        sh(cmd)
        tick(i + 1, len(cmds))
    return len(cmds)


def baseline_down(lab: str) -> None:
    for ns in netns.listed(netns_prefix(lab)):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
