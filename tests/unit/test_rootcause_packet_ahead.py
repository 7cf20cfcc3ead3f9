"""A packet ahead is not a queue: a host's paced flows that each wait behind one full-size packet
of a sibling at its uplink read one packet's time above their floor. `job why` calls that
healthy where one packet's time is that long (120 us at 100 Mbit/s), and still judges the same
delay a queue where the links are fast enough that it is many packets."""

from itertools import pairwise

from clockfabric.controller.rootcause import Flow, FlowPoint, ProbePath, Thresholds
from clockfabric.controller.rootcause_fabric import Fabric
from clockfabric.controller.rootcause_verdict import why
from clockfabric.topology import leafspine

S = 10**9
NOW = 1_000 * S
TOPO = leafspine(4, 2, 2)  # h0,h1 on leaf0; h2,h3 on leaf1
ONE_PACKET_US = 121.0  # what the lab read: one 1500-byte packet at 100 Mbit/s is 120 us


def hops(src, dst, spine):
    (path,) = [p.nodes for p in TOPO.paths(src, dst) if spine in p.nodes]
    return tuple((TOPO.find_link(a, b).name, f"{a}>{b}") for a, b in pairwise(path))


def flow(src, dst, spine, owd_us):
    points = tuple(FlowPoint(NOW - (10 - i) * S, 6e6, 2 * owd_us, owd_us) for i in range(10))
    return Flow(src, f"10.0.0.{src[1:]}:5000->10.0.1.{dst[1:]}:5201", "A", dst, 0, hops(src, dst, spine), 26,
                points)


def case(rate_bps):
    """h0's two flows a packet above their floor, every other flow and probe path at it."""
    flows = [flow("h0", "h2", "spine0", ONE_PACKET_US), flow("h0", "h3", "spine1", ONE_PACKET_US),
             flow("h1", "h2", "spine1", 7.0), flow("h2", "h1", "spine0", 7.0), flow("h3", "h0", "spine1", 7.0),
             flow("h1", "h3", "spine0", 7.0)]
    floors = [ProbePath(s, d, hops(s, d, sp), 4.5, 7.0) for s in TOPO.hosts for d in TOPO.hosts
              if s != d and (s in ("h0", "h1")) != (d in ("h0", "h1")) for sp in ("spine0", "spine1")]
    return why("A", flows, Fabric(floors=floors, link_rates={lk.name: rate_bps for lk in TOPO.links}), NOW, 10 * S)


def test_one_packet_ahead_on_a_100_mbit_uplink_is_healthy():
    v = case(100e6)
    assert v["verdict"] == "healthy", v["sentence"]


def test_the_same_delay_on_10_gbit_links_is_a_queue():
    v = case(10e9)  # 121 us is about a hundred packets there
    assert v["verdict"] != "healthy", v["sentence"]
    assert sorted(f["host"] for f in v["flows"] if f["network_slow"]) == ["h0", "h0"], v["sentence"]


def test_the_margin_is_the_sources_plus_a_packet_on_the_slowest_known_link():
    limits, path = Thresholds(), hops("h0", "h2", "spine0")
    rates = {path[0][0]: 100e6, path[1][0]: 1e9}
    assert limits.margin_us("inband", path, rates) == limits.inband_margin_us + 120.0
    assert limits.margin_us("rtt/2", path, rates) == limits.rtt_margin_us + 120.0
    assert limits.margin_us("inband", path, {}) == limits.inband_margin_us  # no rate known: the margin alone
