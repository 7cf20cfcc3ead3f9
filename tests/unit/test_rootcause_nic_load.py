"""A queue on a host's own link: what its NIC counted tells a link filled by flows not reported
yet (congestion) from one that drains slowly (degraded), where the flows reported say neither."""

from dataclasses import replace

from clockfabric.controller.rootcause_fabric import Fabric
from clockfabric.controller.rootcause_verdict import why
from tests.unit.test_rootcause_located import NOW, TOPO, S, fabric, flow

QUEUE = ("h4", "leaf2")  # h4's uplink queues


def flows():
    return [flow("h4", "h0", "spine0", "A", 6, 912.0),  # slow: over h4 -> leaf2
            flow("h4", "h2", "spine1", "A", 6, 912.0),
            flow("h1", "h3", "spine0", "A", 6, 13.0)]


def with_nic(bps: float | None) -> Fabric:
    base = fabric(QUEUE)
    link = TOPO.find_link(*QUEUE).name
    nic = {} if bps is None else {("h4", link, "tx"): ([NOW - (30 - i) * S for i in range(30)], [bps] * 30)}
    return Fabric(base.floors, base.link_rates, nic=nic)


def test_a_host_link_its_nic_counts_full_is_congested_though_no_flow_reported_fills_it():
    v = why("A", flows(), with_nic(0.95e9), NOW, 30 * S)
    assert (v["verdict"], v["link"], v["culprit"]) == ("congestion_non_job", TOPO.find_link(*QUEUE).name, "(no job)")
    assert v["evidence"]["nic_bps"] == 0.95e9


def test_a_host_link_its_nic_counts_carrying_little_is_degraded():
    for nic in (0.02e9, None):  # counted carrying little, or not counted: the flows reported say so
        v = why("A", flows(), with_nic(nic), NOW, 30 * S)
        assert (v["verdict"], v["link"]) == ("degraded_link", TOPO.find_link(*QUEUE).name), v["sentence"]


def test_a_rate_read_across_the_onset_is_not_load_since_it():
    """h4's uplink drops to 1 of its 20 Mbit/s 5 s ago. Its NIC counted the job's own 12 Mbit/s
    until then; the one rate read since spans the onset, and the host, behind its slow link,
    reports nothing later. That rate holds load from before the fault, not traffic of no job."""
    link = TOPO.find_link(*QUEUE).name
    onset = NOW - 5 * S

    def slowed(dst, spine):
        f = flow("h4", dst, spine, "A", 6, 13.0)
        return replace(f, points=tuple(replace(p, tx_bps=0.5e6, rtt_us=1824.0, owd_us=912.0) if p.t_ns > onset else p
                                       for p in f.points))
    base = fabric(QUEUE)
    reads = [NOW - (30 - i) * S for i in range(25)] + [NOW - 35 * S // 10]
    nic = {("h4", link, "tx"): (reads, [12e6] * 25 + [7e6])}
    fab = Fabric(base.floors, {**base.link_rates, link: 20e6}, nic=nic)
    flows = [slowed("h0", "spine0"), slowed("h2", "spine1"), flow("h1", "h3", "spine0", "A", 6, 13.0)]
    v = why("A", flows, fab, NOW, 30 * S)
    assert (v["verdict"], v["link"]) == ("degraded_link", link), v["sentence"]
    assert v["evidence"]["nic_bps"] is None
    # the same rate read a second later, from a read since the onset, is load since it: under
    # half the link's rate a slow drain still, near its rate traffic of no job filling it
    for since, verdict in ((7e6, "degraded_link"), (19e6, "congestion_non_job")):
        nic = {("h4", link, "tx"): (reads + [NOW - 25 * S // 10], [12e6] * 25 + [7e6, since])}
        v = why("A", flows, replace(fab, nic=nic), NOW, 30 * S)
        assert (v["verdict"], v["evidence"]["nic_bps"]) == (verdict, since), v["sentence"]


def test_a_host_links_unreported_load_tells_it_from_the_links_no_path_tells_apart():
    """Two slow flows leave h4 over one spine and no probe reads since their queue began: h4's
    uplink and leaf2 -> spine0 are crossed by the same flows, and the spine link (slower) is the
    fuller for the job's own load. h4's NIC counts 95 of its 100 Mbit/s: flows not reported yet
    fill the host's link, which is where the job waits."""
    host = TOPO.find_link(*QUEUE).name
    spine = TOPO.find_link("leaf2", "spine0").name
    slow = [flow("h4", "h0", "spine0", "A", 6, 912.0), flow("h4", "h2", "spine0", "A", 6, 912.0),
            flow("h1", "h3", "spine0", "A", 6, 13.0), flow("h0", "h2", "spine1", "A", 6, 13.0),
            flow("h5", "h1", "spine1", "A", 6, 13.0)]
    rates = {lk.name: 100e6 for lk in TOPO.links} | {spine: 20e6}
    nic = {("h4", host, "tx"): ([NOW - (30 - i) * S for i in range(30)], [95e6] * 30)}
    v = why("A", slow, Fabric([], rates, nic=nic), NOW, 30 * S)
    assert (v["verdict"], v["link"], v["culprit"]) == ("congestion_non_job", host, "(no job)"), v["sentence"]
    # a trickle beyond the flows reported (the host's ACKs and probes) is no load: the links stay apart
    nic = {("h4", host, "tx"): ([NOW - (30 - i) * S for i in range(30)], [12.5e6] * 30)}
    v = why("A", slow, Fabric([], rates, nic=nic), NOW, 30 * S)
    assert v["link"] != host, v["sentence"]
