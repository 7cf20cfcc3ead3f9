"""A queue on the sending host's own uplink: neither the in-band capture nor the probes' stamps
see it (both are taken as the packet leaves the host's queue), so the slow flow's delay sits at
its floor and only its round trip shows the queue. `job why` names that uplink, and the load on
it; where a sibling from the same host keeps a short round trip, the uplink is cleared and the
ACKs' way back is what is left."""

from itertools import pairwise

from clockfabric.controller.rootcause import Flow, FlowPoint, ProbePath
from clockfabric.controller.rootcause_verdict import Fabric, why
from clockfabric.topology import leafspine

S = 10**9
NOW = 1_000 * S
TOPO = leafspine(6, 3, 2)  # h0,h1 on leaf0; h2,h3 on leaf1; h4,h5 on leaf2
RATES = {lk.name: 100e6 for lk in TOPO.links}


def hops(src, dst, spine=None):
    (path,) = [p.nodes for p in TOPO.paths(src, dst) if spine is None or spine in p.nodes][:1]
    return tuple((TOPO.find_link(a, b).name, f"{a}>{b}") for a, b in pairwise(path))


def flow(src, dst, jobid, mbps, owd_us, rtt_us, spine=None, port=5000):
    points = tuple(FlowPoint(NOW - (10 - i) * S, mbps * 1e6, rtt_us, owd_us) for i in range(10))
    return Flow(src, f"10.0.0.{src[1:]}:{port}->10.0.1.{dst[1:]}:5201", jobid, dst, 0, hops(src, dst, spine), None,
                points)


def quiet_mesh():
    """Every probe path at its floor: the probes leave each host after its queue, too."""
    return [ProbePath(s, d, hops(s, d, sp), 12.0, 13.0)
            for s in TOPO.hosts for d in TOPO.hosts if int(s[1]) // 2 != int(d[1]) // 2
            for sp in ("spine0", "spine1")]


def test_a_queue_on_the_senders_uplink_is_named_by_the_round_trip_with_its_load():
    flows = [flow("h0", "h2", "A", 5, 13.0, 30_000.0, "spine0"),  # behind B's flow in h0's own queue
             flow("h3", "h4", "A", 5, 13.0, 60.0, "spine1"), flow("h4", "h1", "A", 5, 13.0, 60.0, "spine0"),
             flow("h5", "h3", "A", 5, 13.0, 60.0, "spine1"),
             flow("h0", "h1", "B", 95, 8.0, 30_000.0, port=6000)]  # the culprit, same leaf: h0's uplink full
    v = why("A", flows, Fabric(floors=quiet_mesh(), link_rates=RATES), NOW, 10 * S)
    uplink = TOPO.find_link("h0", "leaf0").name
    assert (v["verdict"], v["link"], v["evidence"]["direction"], v["culprit"]) == (
        "congestion_other_job", uplink, "h0>leaf0", "B"), v
    (slow,) = v["evidence"]["slow_flows"]
    assert slow["host"] == "h0" and slow["egress"] and "round trip" in slow["why"][0]


def test_a_sibling_from_the_same_host_with_a_short_round_trip_clears_its_uplink():
    """h0 -> h2's ACKs come back behind C's flow out of h2: h0's other flow keeps a short round
    trip, so h0's uplink is quiet and h2's uplink (the ACKs' way out) is named."""
    flows = [flow("h0", "h2", "A", 5, 13.0, 30_000.0, "spine0"),
             flow("h0", "h4", "A", 5, 13.0, 60.0, "spine1"), flow("h4", "h1", "A", 5, 13.0, 60.0, "spine0"),
             flow("h5", "h3", "A", 5, 13.0, 60.0, "spine1"),
             flow("h2", "h3", "C", 95, 8.0, 30_000.0, port=6000)]
    v = why("A", flows, Fabric(floors=quiet_mesh(), link_rates=RATES), NOW, 10 * S)
    assert (v["verdict"], v["link"], v["evidence"]["direction"], v["culprit"]) == (
        "congestion_other_job", TOPO.find_link("h2", "leaf1").name, "h2>leaf1", "C"), v


def test_a_round_trip_within_the_margin_of_its_siblings_is_not_slow():
    """A busy host's scheduling and delayed ACKs move a round trip by hundreds of us (424 us
    against its siblings' 88 us, seen on the lab): under the 1 ms margin, not a queue."""
    flows = [flow("h0", "h2", "A", 5, 13.0, 424.0, "spine0"),
             flow("h3", "h4", "A", 5, 13.0, 60.0, "spine1"), flow("h4", "h1", "A", 5, 13.0, 60.0, "spine0")]
    assert why("A", flows, Fabric(floors=quiet_mesh(), link_rates=RATES), NOW, 10 * S)["verdict"] == "healthy"
