"""Among equal suspects, `job why` names the link whose probes queue before the link another job
loads: a load is a hint, a queued probe is the queue itself. A generated mesh where the probe
paths' evidence contradicts itself (paths read at their floor before a queue built still clear
its link), so localization names nothing and the suspects are the slow flow's own hops."""

from itertools import pairwise

from clockfabric.controller.rootcause import Flow, FlowPoint, ProbePath
from clockfabric.controller.rootcause_fabric import Fabric
from clockfabric.controller.rootcause_verdict import why
from clockfabric.topology import leafspine

S = 10**9
NOW = 1_000 * S
TOPO = leafspine(6, 3, 2)  # h0,h1 on leaf0; h2,h3 on leaf1; h4,h5 on leaf2
QUEUED = {("h0", "h4"), ("h1", "h5"), ("h0", "h2")}  # over spine0: each crosses leaf0 -> spine0


def hops(src, dst, spine):
    (path,) = [p.nodes for p in TOPO.paths(src, dst) if spine in p.nodes]
    return tuple((TOPO.find_link(a, b).name, f"{a}>{b}") for a, b in pairwise(path))


def flow(src, dst, spine, jobid, mbps, owd_us):
    points = tuple(FlowPoint(NOW - (10 - i) * S, mbps * 1e6, 2 * owd_us, owd_us) for i in range(10))
    return Flow(src, f"10.0.0.{src[1:]}:5000->10.0.1.{dst[1:]}:5201", jobid, dst, 0, hops(src, dst, spine), 26,
                points)


def mesh():
    """Every pair of hosts under different leaves over both spines: QUEUED's over spine0 far above
    their floor, the rest at it (those over leaf0 -> spine0 read before the queue built)."""
    return [ProbePath(s, d, hops(s, d, sp), 12.0, 900.0 if (s, d) in QUEUED and sp == "spine0" else 13.0)
            for s in TOPO.hosts for d in TOPO.hosts if s != d and s[1] != d[1] and int(s[1]) // 2 != int(d[1]) // 2
            for sp in ("spine0", "spine1")]


def test_the_link_probes_see_queueing_wins_over_the_link_another_job_loads():
    flows = [flow("h0", "h2", "spine0", "A", 5, 900.0),  # slow: over leaf0 -> spine0 and spine0 -> leaf1
             flow("h4", "h1", "spine1", "A", 5, 13.0), flow("h3", "h5", "spine1", "A", 5, 13.0),
             flow("h5", "h3", "spine0", "B", 6, 13.0)]  # B loads spine0 -> leaf1, at its floor
    fabric = Fabric(floors=mesh(), link_rates={lk.name: 20e6 for lk in TOPO.links})
    v = why("A", flows, fabric, NOW, 10 * S)
    assert v["evidence"]["localization"]["strength"] == "unexplained"  # the mesh names nothing here
    assert (v["link"], v["evidence"]["direction"]) == (TOPO.find_link("leaf0", "spine0").name, "leaf0>spine0"), v
    assert v["verdict"] == "degraded_link" and v["culprit"] is None  # no load of others seen on it


def test_of_links_no_evidence_tells_apart_a_load_that_fills_one_is_congestion_there():
    # traffic of no job from h0 fills leaf0 -> spine0 (20 Mbit/s), a fifth of h0's own link: the
    # slow flow's two first hops carry the same load, and no probe tells them apart
    flows = [flow("h0", "h2", "spine0", "A", 5, 50_000.0),
             flow("h4", "h1", "spine1", "A", 5, 13.0), flow("h3", "h5", "spine1", "A", 5, 13.0),
             flow("h0", "h4", "spine0", None, 15, 13.0)]
    rates = {lk.name: 100e6 if lk.name.startswith("h") else 20e6 for lk in TOPO.links}
    v = why("A", flows, Fabric(floors=[], link_rates=rates), NOW, 10 * S)
    uplink = TOPO.find_link("leaf0", "spine0").name
    assert (v["verdict"], v["link"], v["evidence"]["direction"]) == ("congestion_non_job", uplink, "leaf0>spine0"), v
