"""Each NIC of this host as the fleet file names it: present, timestamping, and routing to every
peer on its plane."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

from clockfabric.audit.model import Verdict
from clockfabric.doctor.base import CHECKS, Outcome, Setup
from clockfabric.probe.timestamping import capabilities

SYS_NET = Path("/sys/class/net")
RTN_UNICAST = 1  # a route to a destination (not local, broadcast, blackhole, ...)


@CHECKS.register("nic", help="each NIC of the host: present, with kernel timestamps (hardware where the NIC has them)")
def nic(setup: Setup) -> list[Outcome]:
    cfg = setup.config
    out = []
    for n in cfg.topology.hosts[cfg.host].nics:
        if not (SYS_NET / n.name).exists():
            out.append(Outcome("nic", Verdict.FAIL, f"{n.name} (plane {n.plane}) is not on this host",
                               f"name the NIC as `ip link` shows it in the fleet file's host {cfg.host}, or check "
                               f"that --host {cfg.host} is this host"))
            continue
        caps = capabilities(n.name)
        if not caps.software:
            out.append(Outcome("nic", Verdict.FAIL, f"{n.name}: the driver offers no software timestamps "
                                                    "(ethtool -T)", "update the NIC's driver or kernel"))
            continue
        hw = f"hardware timestamps on /dev/ptp{caps.phc_index}" if caps.hardware else "no hardware timestamps"
        out.append(Outcome("nic", Verdict.PASS, f"{n.name} (plane {n.plane}): software timestamps; {hw}"))
    return out


def routed_out(routes: list, index: int) -> list[ipaddress.IPv4Network]:
    """The unicast destinations, in every table, that some route sends out of interface `index`
    (alone or as one of its multipath next hops). `ip route get ... oif` cannot say: where no
    route fits, the kernel takes the destination to be on the link and answers anyway."""
    nets = []
    for r in routes:
        if r["type"] != RTN_UNICAST:
            continue
        hops = [h["oif"] for h in r.get_attr("RTA_MULTIPATH") or []] or [r.get_attr("RTA_OIF")]
        if index in hops:
            nets.append(ipaddress.IPv4Network(f"{r.get_attr('RTA_DST') or '0.0.0.0'}/{r['dst_len']}"))
    return nets


@CHECKS.register("routes", help="a route to every peer's address on each plane, out of that plane's NIC")
def routes(setup: Setup) -> list[Outcome]:
    cfg = setup.config
    topo = cfg.topology
    try:
        from pyroute2 import IPRoute
    except ImportError:
        return [Outcome("routes", Verdict.SKIP, "pyroute2 is not installed: routes not checked")]
    out = []
    with IPRoute() as ipr:
        table = ipr.route("dump", family=socket.AF_INET)
        for n in topo.hosts[cfg.host].nics:
            index = ipr.link_lookup(ifname=n.name)
            if not index:
                out.append(Outcome("routes", Verdict.SKIP, f"plane {n.plane}: {n.name} is not on this host"))
                continue
            nets = routed_out(table, index[0])
            peers = sorted(h for h, node in topo.hosts.items() if h != cfg.host and node.nic(n.plane) is not None)
            missing = [f"{p} ({topo.hosts[p].address})" for p in peers
                       if not any(topo.hosts[p].address in net for net in nets)]
            if missing:
                shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
                out.append(Outcome("routes", Verdict.FAIL, f"plane {n.plane}: no route out of {n.name} to {shown}",
                                   f"route the fleet's host addresses out of {n.name}, e.g. ip route add "
                                   f"{topo.hosts[peers[0]].address} via <plane {n.plane}'s gateway> dev {n.name}"))
            else:
                out.append(Outcome("routes", Verdict.PASS,
                                   f"plane {n.plane}: {len(peers)} peer(s) routed out of {n.name}"))
    return out
