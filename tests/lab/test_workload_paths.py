"""A busy flow's switch, traced with its own 5-tuple on a real lab.

The trace's raw TCP socket reads every segment the peer sends the host, the traced flow's own
ACKs among them: those once counted as the peer answering the SYN (it being nearer than the
probe's TTL), so a flow sending steadily was seldom traced and a saturating one never."""

from __future__ import annotations

import time

from clockfabric.lab import netns
from clockfabric.lab.flows import PACED, address, flow, spine_port
from clockfabric.lab.process import stop
from clockfabric.probe.paths import spread, trace
from clockfabric.topology import interfaces, leafspine
from clockfabric.workload.paths import TTL


def test_a_busy_flows_own_5_tuple_is_traced_to_its_spine(make_lab, tmp_path):
    lab = make_lab(leafspine(4, 2, 2, host_rate="100mbit", fabric_rate="20mbit"))
    spine1 = {str(i.address.ip) for p, i in interfaces(lab.topology).items() if p.node == "spine1"}
    for port, pace in ((5501, PACED), (5502, {})):  # paced bursts, then saturating
        sport = spine_port(lab, "h0", "h2", port, "spine1", spread)
        procs = flow(lab, tmp_path, None, "h0", "h2", port, spine="spine1", spread=spread, **pace)
        try:
            time.sleep(2.0)  # connected and sending
            with netns.entered(lab.ns("h0")):
                hops = [trace(address(lab, "h0"), address(lab, "h2"), [(sport, port)], ttl=TTL)[(sport, port)]
                        for _ in range(10)]
        finally:
            stop(procs, grace_s=1.0)
        assert all(hop in spine1 for hop in hops), (pace, hops)
