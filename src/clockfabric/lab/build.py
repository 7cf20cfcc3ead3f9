"""Bring a lab up from a topology, and take it down again, completely.

up: record -> namespaces -> per-namespace sysctls -> cables (veth pairs made directly
between namespaces, so the root namespace is never touched) -> addresses, link speeds
-> routes -> hosts files -> host clocks. Any failure, or Ctrl-C, tears down whatever was made.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from pyroute2 import IPRoute

from clockfabric.clock.vclock import random_clocks
from clockfabric.errors import ClockfabricError
from clockfabric.lab import hostsfile, netns, process, shaping
from clockfabric.lab.naming import check_lab_name, check_port_names, link_alias
from clockfabric.lab.state import Lab, create_record, is_ours, lab_namespaces, remove_record, run_dir
from clockfabric.topology import Route, Topology, dumps, interfaces, routing_tables

Progress = Callable[[str, int, int], None]  # (stage, done, total)

COMMON_SYSCTLS: dict[str, str | int] = {
    "net.ipv6.conf.all.disable_ipv6": 1,  # keep the fabric quiet: no RS, DAD or MLD chatter
    "net.ipv6.conf.default.disable_ipv6": 1,
    "net.ipv4.conf.all.rp_filter": 0,  # replies may return over another plane
    "net.ipv4.conf.default.rp_filter": 0,
    "net.ipv4.conf.all.ignore_routes_with_linkdown": 1,  # a dead cable leaves ECMP at once
    "net.ipv4.fib_multipath_hash_policy": 1,  # ECMP hashes the 5-tuple
}
SWITCH_SYSCTLS: dict[str, str | int] = {
    "net.ipv4.ip_forward": 1,
    "net.ipv4.icmp_ratelimit": 0,  # switches answer every TTL-expired probe (path discovery)
    "net.ipv4.icmp_msgs_per_sec": 1_000_000,
    "net.ipv4.icmp_msgs_burst": 1_000_000,  # the global ICMP bucket, else a burst of probes loses replies
    # hash each packet's own headers, as a switch chip does: under policy 1 Linux reuses the hash a
    # TCP socket stamped on its packets (random per connection), so a source port would not pick
    # the spine. Fields: both addresses, protocol, both ports (needs Linux 5.16+)
    "net.ipv4.fib_multipath_hash_policy": 3,
    "net.ipv4.fib_multipath_hash_fields": "0x0037",
}


@dataclass(frozen=True)
class ClockSettings:
    max_offset_ns: int = 50_000_000
    max_drift_ppm: float = 100.0
    wander_ns: float = 0.0
    seed: int = 1


def up(topo: Topology, name: str, clocks: ClockSettings = ClockSettings(),
       progress: Progress | None = None) -> Lab:
    check_lab_name(name)
    check_port_names(topo)
    if lab_namespaces(name):
        raise ClockfabricError(f"lab {name!r} already has namespaces; remove it first: clockfabric lab down {name}")
    folder = create_record(name, dumps(topo))
    lab = Lab(name, folder, topo)
    socks: dict[str, IPRoute] = {}
    report = progress or (lambda *_: None)
    try:
        nodes = topo.nodes()
        for i, node in enumerate(nodes):
            netns.create(lab.ns(node))
            netns.write_sysctls(lab.ns(node), COMMON_SYSCTLS | (SWITCH_SYSCTLS if node in topo.switches else {}))
            socks[node] = netns.ipr(lab.ns(node))
            report("namespaces", i + 1, len(nodes))
        _cable(lab, socks, report)
        _route(lab, socks, report)
        hostsfile.write(topo, lab.ns)
        epoch = time.time_ns()
        for clock in random_clocks(list(topo.hosts), max_offset_ns=clocks.max_offset_ns,
                                   max_drift_ppm=clocks.max_drift_ppm, wander_ns=clocks.wander_ns,
                                   seed=clocks.seed, epoch_ns=epoch).values():
            lab.save_clock(clock)
        (folder / "up").write_text(f"{epoch}\n")  # marks the lab complete
        report("done", 1, 1)
        return lab
    except BaseException as e:
        for s in socks.values():
            s.close()
        socks.clear()
        down(name)
        if isinstance(e, ClockfabricError):
            raise
        if isinstance(e, KeyboardInterrupt):
            raise ClockfabricError(f"lab up {name} interrupted; everything it made was removed") from None
        raise ClockfabricError(f"lab up {name} failed: {_describe(e)}; everything it made was removed") from None
    finally:
        for s in socks.values():
            s.close()


def _describe(e: BaseException) -> str:
    text = getattr(e, "strerror", None) or str(e) or type(e).__name__
    return f"{type(e).__name__}: {text}"


def _cable(lab: Lab, socks: dict[str, IPRoute], report: Progress) -> None:
    topo = lab.topology
    ifaces = interfaces(topo)
    fds = {n: os.open(netns.NETNS_DIR / lab.ns(n), os.O_RDONLY) for n in topo.nodes()}
    try:
        for h in topo.hosts.values():
            ipr = socks[h.name]
            lo = ipr.link_lookup(ifname="lo")[0]
            ipr.link("set", index=lo, state="up")
            ipr.addr("add", index=lo, address=str(h.address), prefixlen=32)
        for i, lk in enumerate(topo.links):
            a, b = socks[lk.a.node], socks[lk.b.node]
            a.link("add", ifname=lk.a.iface, kind="veth", gso_max_segs=1, mtu=topo.mtu,  # MTU-sized packets in queues
                   peer={"ifname": lk.b.iface, "net_ns_fd": fds[lk.b.node], "gso_max_segs": 1, "mtu": topo.mtu})
            for ipr, port in ((a, lk.a), (b, lk.b)):
                index = ipr.link_lookup(ifname=port.iface)[0]
                itf = ifaces[port]
                ipr.link("set", index=index, ifalias=link_alias(lab.name, lk.name))
                ipr.addr("add", index=index, address=str(itf.address.ip), prefixlen=itf.address.network.prefixlen)
                shaping.shape(ipr, index, lk.rate_bps, lk.buffer_pkts, topo.classes)
                ipr.link("set", index=index, state="up")
            report("links", i + 1, len(topo.links))
    finally:
        for fd in fds.values():
            os.close(fd)


def _route(lab: Lab, socks: dict[str, IPRoute], report: Progress) -> None:
    tables = routing_tables(lab.topology)
    for i, (node, routes) in enumerate(tables.items()):
        install_routes(socks[node], routes)
        report("routes", i + 1, len(tables))


def install_routes(ipr: IPRoute, routes: list[Route]) -> None:
    """Install (or restore) a node's routes; `replace` makes it safe to run again."""
    index = {link.get("ifname"): link["index"] for link in ipr.get_links()}
    for r in routes:
        spec: dict[str, object] = {"dst": str(r.dst)}
        if r.src:
            spec["prefsrc"] = str(r.src)
        if len(r.nexthops) == 1:
            spec |= {"gateway": str(r.nexthops[0].gateway), "oif": index[r.nexthops[0].iface]}
        else:
            spec["multipath"] = [{"gateway": str(h.gateway), "oif": index[h.iface]} for h in r.nexthops]
        ipr.route("replace", **spec)


def down(name: str) -> list[str]:
    """Remove everything of lab `name` that exists: processes, namespaces, record.

    Idempotent, and works on half-built or crashed labs. Returns the namespaces removed.
    """
    check_lab_name(name)
    namespaces = lab_namespaces(name)
    inside = {p for ns in namespaces for p in netns.pids(ns)}  # everything in the lab's namespaces is ours
    recorded = [int(rec.stem) for rec in (run_dir() / name).glob("procs/*.json")]
    process.stop_pids([*inside, *recorded], lambda pid: pid in inside or is_ours(pid, name))
    for ns in namespaces:
        netns.remove(ns)
    hostsfile.remove(name)
    remove_record(name)
    return namespaces
