"""Plant six faults at once on a dual-plane lab (examples/dualplane-8.yaml), for the audit to find.

    clockfabric lab up examples/dualplane-8.yaml --name faults
    python examples/seeded_faults.py --lab faults        # prints what it planted, as JSON
    clockfabric audit --lab faults                       # should name each one, and nothing else
    clockfabric lab down faults                          # removes the faults with the lab

Each fault is made the way it happens on a real cluster, with the lab's real mechanisms:
a cable pulled, an MTU set by hand, two cables swapped, a link that trained at a quarter of
its speed, a host with another package version on its path, and a host behind a standing
queue (a slow port kept full by traffic), about 5 ms further than its peers.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time

from clockfabric.errors import ClockfabricError
from clockfabric.lab import impair, netns, shaping
from clockfabric.lab.exec import command
from clockfabric.lab.state import Lab
from clockfabric.lab.traffic import iperf_server, server_log
from clockfabric.topology import Port, interfaces

FAR_RATE_BPS = 20_000_000
FAR_BUFFER = "16K"  # a UDP sender's socket buffer (the kernel doubles it): ~8 datagrams queued, ~5 ms at that rate


def nic_down(lab: Lab) -> None:
    impair.set_link(lab, impair.find_link(lab, "h1", "p1-leaf0"), up=False)


def mtu_mismatch(lab: Lab) -> None:
    with netns.ipr(lab.ns("h2")) as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname="eth0")[0], mtu=9000)


def cables_swapped(lab: Lab) -> None:
    impair.swap_cables(lab, Port("h3", "eth0"), Port("h4", "eth0"))


def quarter_rate(lab: Lab) -> None:
    link = impair.find_link(lab, "h5", "p1-leaf1")
    impair.set_rate(lab, link, link.rate_bps // 4)


def other_version(lab: Lab) -> None:
    """Python finds the first torch on its path: give h6 a torch 2.12.0 ahead of the shared one."""
    site = lab.dir / "overlay" / "h6"
    meta = site / "torch-2.12.0.dist-info"
    meta.mkdir(parents=True, exist_ok=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.12.0\n")
    lab.set_host_env("h6", {"PYTHONPATH": str(site)})


def far_host(lab: Lab) -> None:
    """The leaf port towards h7's plane-1 NIC runs slow, with a standing queue in it: the leaf
    itself sends h7 UDP faster than the port drains, from a socket buffer so small that the
    queue holds ~5 ms and never overflows (pings wait in it, none is dropped). Nothing else
    carries the load: sent from a neighbour host, it kept that host's own NIC ~80% busy (a CI
    audit named it far too); sent from a spine, it would load a fabric link that others use; and TCP from the
    leaf keeps only ~1 ms queued in the leaf's own port."""
    port = impair.find_link(lab, "h7", "p1-leaf1").other("h7")
    with netns.ipr(lab.ns(port.node)) as ipr:
        index = ipr.link_lookup(ifname=port.iface)[0]
        shaping.set_rate(ipr, index, FAR_RATE_BPS)
    ends = interfaces(lab.topology)
    target, source = str(ends[Port("h7", "eth1")].address.ip), str(ends[port].address.ip)
    server = iperf_server(lab, "h7", target, 5299)
    lab.register(server.pid, "seeded fault: iperf3 server on h7")
    client = subprocess.Popen(command(lab, port.node, ["iperf3", "-u", "-c", target, "-B", source, "-p", "5299",
                                                       "-b", str(2 * FAR_RATE_BPS), "-t", "86400",
                                                       "-w", FAR_BUFFER]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lab.register(client.pid, f"seeded fault: UDP load {port.node} -> h7:eth1")
    # planted means queueing now: an audit started before the flow ran a second once saw h7 near
    log, deadline = server_log(lab, "h7", target, 5299), time.monotonic() + 15
    while not re.search(r"\s0\.00-1\.\d+\s+sec", log.read_text()):
        if time.monotonic() > deadline or client.poll() is not None:
            raise ClockfabricError(f"the load towards h7 did not start: {log.read_text().strip()[-200:]}")
        time.sleep(0.05)


FAULTS = [  # (host, nic, what, how): what the audit should report, and where
    ("h1", "eth1", "NIC down (cable pulled)", nic_down),
    ("h2", "eth0", "MTU 9000 on a 1500 fabric", mtu_mismatch),
    ("h3", "eth0", "cable swapped with h4:eth0", cables_swapped),
    ("h4", "eth0", "cable swapped with h3:eth0", None),
    ("h5", "eth1", "link at a quarter of its rate", quarter_rate),
    ("h6", "", "torch 2.12.0 where the fleet has another", other_version),
    ("h7", "eth1", "5 ms far: a full queue in front of it", far_host),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", required=True, help="a lab of examples/dualplane-8.yaml")
    args = parser.parse_args()
    try:
        lab = Lab.open(args.lab)
    except ClockfabricError as e:
        print(e, file=sys.stderr)
        return 2
    if not {"h1", "h7", "p1-leaf1"} <= set(lab.topology.nodes()):
        print(f"lab {lab.name} is not examples/dualplane-8.yaml (h0-h7, p0/p1 leaves)", file=sys.stderr)
        return 2
    try:
        for _, _, _, plant in FAULTS:
            if plant:
                plant(lab)
    except ClockfabricError as e:
        print(f"seeding faults on lab {lab.name} failed: {e}", file=sys.stderr)
        return 2
    json.dump([{"host": h, "nic": n, "fault": what} for h, n, what, _ in FAULTS], sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
