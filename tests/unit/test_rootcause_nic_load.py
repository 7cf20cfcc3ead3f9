"""A queue on a host's own link: what its NIC counted tells a link filled by flows not reported
yet (congestion) from one that drains slowly (degraded), where the flows reported say neither."""

from tests.unit.test_rootcause_located import NOW, S, TOPO, fabric, flow

from clockfabric.controller.rootcause_verdict import Fabric, why

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
