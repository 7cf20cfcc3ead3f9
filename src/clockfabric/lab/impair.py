"""Failures you can inject: a link down or up, a flap schedule, a new link speed.

A cable pull is emulated by taking the *far* end of the link down (the switch side of a
host link): the near end then sees carrier loss exactly as it would from a real failure,
with netlink events and carrier_changes, while its own configuration stays untouched.
A *silent* failure (a bad optic, a wedged ASIC port) drops every packet both ways while
both ends keep carrier: no event, so the fabric's routing never converges around it and
only end-to-end probing can find it. The port buffers are set to hold no packet.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from pyroute2 import NetlinkError

from clockfabric.errors import ClockfabricError
from clockfabric.lab import netns, shaping
from clockfabric.lab.build import install_routes
from clockfabric.lab.state import Lab
from clockfabric.topology import Link, Port, interfaces, routing_tables

SWAP_IFNAME = "cfswap"  # a moved NIC's name in its new host until it takes the place of that host's NIC


def find_link(lab: Lab, a: str, b: str) -> Link:
    for end in (a, b):
        lab.node(end.partition(":")[0])
    try:
        return lab.topology.find_link(a, b)
    except KeyError as e:
        if e.args[0] == 0:
            raise ClockfabricError(f"no link between {a} and {b} in lab {lab.name}; "
                                   "`clockfabric lab status` lists the links") from None
        raise ClockfabricError(f"{a} and {b} are joined by several links; name the ports, like {a}:swp1") from None


def far_end(lab: Lab, link: Link) -> Port:
    return link.a if link.b.node in lab.topology.hosts else link.b


def set_link(lab: Lab, link: Link, up: bool, *, silent: bool = False) -> int:
    """Down (silently: carrier stays, the fabric does not notice) or back up. Returns the time
    (time.time_ns) just before the kernel was told: when the failure starts, for whoever
    measures how fast it is seen (the call's own set-up can take tens of ms on a busy machine)."""
    index = lab.topology.links.index(link)
    silenced = lab.silent_links()
    changed_ns = 0
    if silent or (up and index in silenced):
        for port in (link.a, link.b):
            with netns.ipr(lab.ns(port.node)) as ipr:
                nic = ipr.link_lookup(ifname=port.iface)[0]
                changed_ns = changed_ns or time.time_ns()
                shaping.set_buffer(ipr, nic, link.buffer_pkts if up else 0, lab.topology.classes)
        lab.save_silent_links(silenced - {index} if up else silenced | {index})
        if silent:
            return changed_ns
    port = far_end(lab, link)
    failed = lab.failed_links()
    failed = failed - {index} if up else failed | {index}
    lab.save_failed_links(failed)
    with netns.ipr(lab.ns(port.node)) as ipr:
        nic = ipr.link_lookup(ifname=port.iface)[0]
        changed_ns = time.time_ns()
        ipr.link("set", index=nic, state="up" if up else "down")
    converge(lab, lab.topology.plane_of(link.a), failed)
    return changed_ns


def converge(lab: Lab, plane: int, failed: frozenset[int]) -> None:
    """Give the plane's switches the routes a BGP fabric would settle on around the failures.

    Also restores routes the kernel dropped from a port that was taken down."""
    topo = lab.topology
    now, full = routing_tables(topo, failed), routing_tables(topo)
    for sw in (s.name for s in topo.switches.values() if s.plane == plane):
        with netns.ipr(lab.ns(sw)) as ipr:
            install_routes(ipr, now[sw])
            kept = {r.dst for r in now[sw]}
            for gone in (r.dst for r in full[sw] if r.dst not in kept):
                try:
                    ipr.route("del", dst=str(gone))
                except NetlinkError:  # already gone with its port
                    pass


def flap(lab: Lab, link: Link, *, down_s: float, up_s: float, count: int, silent: bool = False,
         on_change: Callable[[int, bool], None] | None = None) -> None:
    """Down for down_s, up for up_s, count times; always leaves the link up."""
    try:
        for i in range(count):
            set_link(lab, link, up=False, silent=silent)
            if on_change:
                on_change(i, False)
            time.sleep(down_s)
            set_link(lab, link, up=True)
            if on_change:
                on_change(i, True)
            if i + 1 < count:
                time.sleep(up_s)
    finally:
        set_link(lab, link, up=True)


def set_rate(lab: Lab, link: Link, rate_bps: int) -> None:
    """New speed for both directions of the link."""
    for port in (link.a, link.b):
        with netns.ipr(lab.ns(port.node)) as ipr:
            shaping.set_rate(ipr, ipr.link_lookup(ifname=port.iface)[0], rate_bps, lab.topology.classes)


def swap_cables(lab: Lab, a: Port, b: Port) -> None:
    """Plug host NIC a's cable into b and b's into a (a cabling mistake); the same call swaps back.

    Each NIC keeps its name, its planned address and its host's routes, but now reaches the
    other cable's switch port. A veth end that moves between namespaces loses its address,
    routes and qdisc, so all three are put back."""
    topo = lab.topology
    for p in (a, b):
        if p.node not in topo.hosts or not any(n.name == p.iface for n in topo.hosts[p.node].nics):
            raise ClockfabricError(f"{p} is not a host NIC of lab {lab.name}; give HOST:NIC, like h3:eth0")
    if a.node == b.node:
        raise ClockfabricError("swap cables between two different hosts")
    cables = lab.cables()
    if any(cables.get(str(p), str(p)) != str(p) for p in (a, b)) and cables.get(str(a)) != str(b):
        raise ClockfabricError(f"{a} or {b} already has another host's cable; swap that back first")
    plan = interfaces(topo)
    fds = {p: os.open(netns.NETNS_DIR / lab.ns(p.node), os.O_RDONLY) for p in (a, b)}
    try:
        # each NIC's veth moves, renamed, to the other host (a fixed name: a node's may be too long for one)
        for here, there in ((a, b), (b, a)):
            with netns.ipr(lab.ns(here.node)) as ipr:
                index = ipr.link_lookup(ifname=here.iface)[0]
                ipr.link("set", index=index, state="down")
                ipr.link("set", index=index, ifname=SWAP_IFNAME, net_ns_fd=fds[there])
        for here, there in ((a, b), (b, a)):  # ... and takes the place of that host's NIC
            cable = topo.links[plan[Port.parse(cables.get(str(here), str(here)))].link_index]
            with netns.ipr(lab.ns(there.node)) as ipr:
                index = ipr.link_lookup(ifname=SWAP_IFNAME)[0]
                ipr.link("set", index=index, ifname=there.iface)
                ipr.addr("add", index=index, address=str(plan[there].address.ip),
                         prefixlen=plan[there].address.network.prefixlen)
                shaping.shape(ipr, index, cable.rate_bps, cable.buffer_pkts, topo.classes)
                ipr.link("set", index=index, state="up")
        tables = routing_tables(topo)
        for p in (a, b):
            with netns.ipr(lab.ns(p.node)) as ipr:
                install_routes(ipr, tables[p.node])
    finally:
        for fd in fds.values():
            os.close(fd)
    swapped = cables.get(str(a)) == str(b)
    for p, q in ((a, b), (b, a)):
        if swapped:
            cables.pop(str(p), None)
        else:
            cables[str(p)] = str(q)
    lab.save_cables(cables)
