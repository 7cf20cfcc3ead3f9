"""Each NIC of this host as the fleet file names it: present, timestamping, and routing to every
peer on its plane."""

from __future__ import annotations

from pathlib import Path

from clockfabric.audit.model import Verdict
from clockfabric.doctor.base import CHECKS, Outcome, Setup
from clockfabric.probe.timestamping import capabilities

SYS_NET = Path("/sys/class/net")


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


@CHECKS.register("routes", help="a route to every peer's address on each plane, out of that plane's NIC")
def routes(setup: Setup) -> list[Outcome]:
    cfg = setup.config
    topo = cfg.topology
    try:
        from pyroute2 import IPRoute
        from pyroute2.netlink.exceptions import NetlinkError
    except ImportError:
        return [Outcome("routes", Verdict.SKIP, "pyroute2 is not installed: routes not checked")]
    out = []
    with IPRoute() as ipr:
        for n in topo.hosts[cfg.host].nics:
            index = ipr.link_lookup(ifname=n.name)
            if not index:
                out.append(Outcome("routes", Verdict.SKIP, f"plane {n.plane}: {n.name} is not on this host"))
                continue
            peers = sorted(h for h, node in topo.hosts.items() if h != cfg.host and node.nic(n.plane) is not None)
            missing = []
            for peer in peers:
                address = str(topo.hosts[peer].address)
                try:
                    ipr.route("get", dst=address, oif=index[0])
                except NetlinkError as e:
                    missing.append(f"{peer} ({address}): {e.args[1] if len(e.args) > 1 else e}")
            if missing:
                shown = "; ".join(missing[:3]) + (f"; and {len(missing) - 3} more" if len(missing) > 3 else "")
                out.append(Outcome("routes", Verdict.FAIL, f"plane {n.plane}: no route out of {n.name} to {shown}",
                                   f"route the fleet's host addresses out of {n.name} (ip route add "
                                   f"{topo.hosts[peers[0]].address} dev {n.name} via <the plane's gateway>)"))
            else:
                out.append(Outcome("routes", Verdict.PASS,
                                   f"plane {n.plane}: {len(peers)} peer(s) routed out of {n.name}"))
    return out
