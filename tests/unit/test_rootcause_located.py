"""`job why` takes the link from localization where the probe mesh's evidence names one."""

from dataclasses import replace
from itertools import pairwise

import pytest

from clockfabric.controller.rootcause import Flow, FlowPoint, ProbePath
from clockfabric.controller.rootcause_fabric import Fabric
from clockfabric.controller.rootcause_verdict import why
from clockfabric.topology import leafspine

S = 10**9
NOW = 1_000 * S
TOPO = leafspine(6, 3, 2)  # h0,h1 on leaf0; h2,h3 on leaf1; h4,h5 on leaf2
QUEUE = ("spine0", "leaf1")  # spine0 -> leaf1 queues, carrying little: a degraded link


def hops(src, dst, spine, topo=TOPO):
    (path,) = [p.nodes for p in topo.paths(src, dst) if spine in p.nodes]
    return tuple((topo.find_link(a, b).name, f"{a}>{b}") for a, b in pairwise(path))


def queued(route, queue=QUEUE):
    return any(way == ">".join(queue) for _, way in route)


def flow(src, dst, spine, jobid, mbps, owd_us, rtt_us=None, topo=TOPO):
    rtt_us = 2 * owd_us if rtt_us is None else rtt_us
    points = tuple(FlowPoint(NOW - (30 - i) * S, mbps * 1e6, rtt_us, owd_us) for i in range(30))
    return Flow(src, f"10.0.0.{src[1:]}:5000->10.0.1.{dst[1:]}:5201", jobid, dst, 0, hops(src, dst, spine, topo),
                26, points)


def fabric(queue=QUEUE):
    floors = [ProbePath(s, d, hops(s, d, sp), 12.0, 912.0 if queued(hops(s, d, sp), queue) else 13.0)
              for s in TOPO.hosts for d in TOPO.hosts if s[1] != d[1] and s != d
              for sp in ("spine0", "spine1") if any(sp in p.nodes for p in TOPO.paths(s, d))]
    return Fabric(floors=floors, link_rates={lk.name: 1e9 for lk in TOPO.links})


def test_the_mesh_names_the_queued_link_where_another_jobs_load_would_mislead():
    flows = [flow("h0", "h2", "spine0", "A", 50, 912.0),  # slow: over spine0 -> leaf1
             flow("h4", "h0", "spine1", "A", 300, 13.0),
             flow("h1", "h4", "spine0", "B", 500, 13.0)]  # B loads leaf0 -> spine0, at its floor
    v = why("A", flows, fabric(), NOW, 30 * S)
    link = TOPO.find_link(*QUEUE).name
    assert (v["verdict"], v["link"], v["evidence"]["direction"]) == ("degraded_link", link, "spine0>leaf1")
    top = v["evidence"]["localization"]["suspects"][0]
    assert top["links"] == [{"link": link, "direction": "spine0->leaf1"}] and not top["ambiguous"]


def test_siblings_whose_acks_wait_in_the_same_queue_do_not_clear_it():
    # h4's own uplink queues (another sender on h4 fills it): every path from h4 waits 900 us, and
    # so do the ACKs of the flows into h4, which make half the healthy siblings' round trips. Their
    # round trips are then the siblings' usual, yet the queue is theirs too
    queue = ("h4", "leaf2")
    flows = [flow("h4", "h0", "spine0", "A", 50, 912.0),  # slow: over h4 -> leaf2
             flow("h4", "h2", "spine1", "A", 50, 912.0),
             flow("h0", "h4", "spine0", "A", 50, 13.0, rtt_us=926.0),  # healthy: ACKs from h4 wait
             flow("h2", "h4", "spine1", "A", 50, 13.0, rtt_us=926.0),
             flow("h1", "h3", "spine0", "A", 50, 13.0)]
    v = why("A", flows, fabric(queue), NOW, 30 * S)
    link = TOPO.find_link(*queue).name
    assert (v["link"], v["evidence"]["direction"]) == (link, "h4>leaf2"), v["sentence"]


def test_a_probe_read_before_the_queue_began_does_not_clear_it():
    # spine0 -> leaf1 has queued for the last 5 s. The mesh probes each path every few seconds:
    # h0's and h1's paths across it were read since (queued), h4's and h5's before (at floor)
    onset = NOW - 5 * S
    slow = flow("h0", "h2", "spine0", "A", 50, 912.0)
    slow = Flow(slow.host, slow.flow, slow.jobid, slow.peer, slow.plane, slow.hops, slow.dscp,
                tuple(FlowPoint(p.t_ns, p.tx_bps, p.rtt_us, 912.0 if p.t_ns > onset else 13.0) for p in slow.points))
    flows = [slow, flow("h4", "h0", "spine1", "A", 300, 13.0)]

    def mesh(read_at_ns):
        paths = []
        for p in fabric().floors:
            if queued(p.hops) and p.src in ("h4", "h5"):
                p = ProbePath(p.src, p.dst, p.hops, p.floor_us, 13.0, read_at_ns)
            paths.append(ProbePath(p.src, p.dst, p.hops, p.floor_us, p.p50_us, p.t_ns or NOW - S))
        return Fabric(floors=paths, link_rates={lk.name: 1e9 for lk in TOPO.links})

    link = TOPO.find_link(*QUEUE).name
    v = why("A", flows, mesh(onset - 3 * S), NOW, 30 * S)
    assert (v["link"], v["evidence"]["direction"]) == (link, "spine0>leaf1"), v["sentence"]
    # read at its floor after the queue began, the same paths do clear it
    v = why("A", flows, mesh(onset + 2 * S), NOW, 30 * S)
    assert v["link"] != link, v["sentence"]


def test_a_slow_link_behind_a_queued_uplink_is_named_where_the_flow_waits_most():
    # h4, alone under leaf2, sends job B's bulk flow, which fills its own uplink: every path from
    # h4 waits 300 us there. leaf2 -> spine1, behind it, drains slowly: h4's paths across it wait
    # 900 us more. The uplink alone explains every queued path; only what the paths over spine1
    # wait beyond the others shows the second queue, and job A's slow flow waits most there
    topo = leafspine(5, 3, 2)

    def excess(route):
        return 300.0 * any(w == "h4>leaf2" for _, w in route) + 900.0 * any(w == "leaf2>spine1" for _, w in route)
    floors = [ProbePath(s, d, route, 12.0, 12.0 + excess(route)) for s in topo.hosts for d in topo.hosts
              if topo.hosts[s] is not topo.hosts[d] and s[1] != d[1] for sp in ("spine0", "spine1")
              if any(sp in p.nodes for p in topo.paths(s, d)) for route in (hops(s, d, sp, topo),)]
    flows = [flow("h4", "h0", "spine1", "A", 5, 1212.0, topo=topo),  # slow: across both queues
             flow("h0", "h2", "spine0", "A", 5, 13.0, topo=topo),
             flow("h3", "h1", "spine1", "A", 5, 13.0, topo=topo),
             flow("h4", "h1", "spine0", "B", 900, 312.0, topo=topo)]
    v = why("A", flows, Fabric(floors=floors, link_rates={lk.name: 1e9 for lk in topo.links}), NOW, 30 * S)
    assert (v["verdict"], v["link"], v["evidence"]["direction"]) == (
        "degraded_link", topo.find_link("leaf2", "spine1").name, "leaf2>spine1"), v["sentence"]
    suspects = {(lk["link"], lk["direction"]): s["excess_us"] for s in v["evidence"]["localization"]["suspects"]
                for lk in s["links"]}
    assert suspects[(topo.find_link("h4", "leaf2").name, "h4->leaf2")] == pytest.approx(300.0, abs=1.0)
    assert suspects[(topo.find_link("leaf2", "spine1").name, "leaf2->spine1")] == pytest.approx(900.0, abs=1.0)


def test_flows_queued_opposite_ways_across_one_link_name_that_link():
    # leaf1 -- spine0 is degraded both ways. h2 -> h0 queues leaving leaf1, h4 -> h3 entering it:
    # their paths share no hop, only the link, and no probe has read since (on a fabric with
    # classes the clock's ride past the queue). Each flow alone leaves three links; the link both
    # cross, one each way, explains both queues
    link = TOPO.find_link("leaf1", "spine0").name
    unread = Fabric(floors=[ProbePath(p.src, p.dst, p.hops, p.floor_us, None) for p in fabric().floors],
                    link_rates={lk.name: 1e9 for lk in TOPO.links})
    healthy = [flow("h5", "h0", "spine1", "A", 5, 13.0), flow("h1", "h3", "spine1", "A", 5, 13.0)]
    flows = [flow("h2", "h0", "spine0", "A", 1, 712_000.0), flow("h4", "h3", "spine0", "A", 1, 432_000.0), *healthy]
    v = why("A", flows, unread, NOW, 30 * S)
    assert (v["verdict"], v["links"]) == ("degraded_link", [link]), v["sentence"]
    assert v["evidence"]["direction"] in ("leaf1>spine0", "spine0>leaf1")
    # one queue alone: where it waits, the three links it cannot tell apart, as before
    alone = why("A", flows[:1] + healthy, unread, NOW, 30 * S)
    assert link in alone["links"] and len(alone["links"]) == 3 and alone["ambiguous"]
    # a flow that only waits (no delay of its own to show a queue) explains nothing the link does
    held = Flow(**{**flows[1].__dict__, "points": tuple(
        FlowPoint(p.t_ns, p.tx_bps, 26.0, 13.0, send_queue_bytes=400_000.0) for p in flows[1].points)})
    v = why("A", [flows[0], held, *healthy], unread, NOW, 30 * S)
    assert link in v["links"] and len(v["links"]) == 3, v["sentence"]


def test_of_links_no_path_tells_apart_the_one_the_mesh_finds_queued_the_other_way_is_named():
    # h0's link is degraded, both ways. Job A's flow into h0 only waits (its data in the send
    # queue, its delay at the floor): nothing on its path clears or locates, so its four links are
    # alike. Every probe path from h0 queues, and the mesh locates that queue alone on h0 -> leaf0:
    # of the four, h0's link is the one slow the other way
    link = TOPO.find_link("h0", "leaf0").name
    mesh = Fabric(floors=[ProbePath(p.src, p.dst, p.hops, p.floor_us, 912.0 if p.src == "h0" else None)
                          for p in fabric().floors], link_rates={lk.name: 1e9 for lk in TOPO.links})
    into = flow("h2", "h0", "spine0", "A", 1, 13.0)
    waiting = Flow(**{**into.__dict__, "points": tuple(replace(p, send_queue_bytes=400_000.0) for p in into.points)})
    healthy = [flow("h5", "h3", "spine1", "A", 5, 13.0), flow("h1", "h3", "spine1", "A", 5, 13.0)]
    v = why("A", [waiting, *healthy], mesh, NOW, 30 * S)
    found = (v["verdict"], v["links"], v["evidence"]["direction"])
    assert found == ("degraded_link", [link], "leaf0>h0"), v["sentence"]
    # the other way quiet (probed, at the floor, from elsewhere): nothing narrows the four
    quiet = Fabric(floors=[ProbePath(p.src, p.dst, p.hops, p.floor_us, 13.0 if p.src == "h0" else None)
                           for p in fabric().floors], link_rates={lk.name: 1e9 for lk in TOPO.links})
    v = why("A", [waiting, *healthy], quiet, NOW, 30 * S)
    assert link in v["links"] and len(v["links"]) > 1, v["sentence"]


def test_the_other_way_is_read_from_the_suspect_most_paths_show():
    # a waiting flow's links leaf1 -> spine1 -> leaf0 -> h4, alike. The mesh locates the queue
    # the other way on leaf0 -> spine1 -> leaf1 (twins, ten paths) and, alone, on h4 -> leaf0 from
    # four paths (a fitted share of the same queue): the ten paths decide
    from clockfabric.controller.rootcause_fabric import both_ways
    from clockfabric.localization import Suspect
    up, down, host = ("l1s1", "leaf1>spine1"), ("l0s1", "spine1>leaf0"), ("h4l0", "leaf0>h4")
    twins = Suspect((("l0s1", "leaf0>spine1"), ("l1s1", "spine1>leaf1")), 66_000.0, tuple(f"p{i}" for i in range(10)))
    lone = Suspect((("h4l0", "h4>leaf0"),), 65_000.0, ("q0", "q1", "q2", "q3"))
    best = [up, down, host]
    assert both_ways(best, best, [], [lone, twins]) == [up, down]
    assert both_ways(best, best, [], [lone]) == [host]
    assert both_ways(best, best, [], []) == best


def test_a_queue_deeper_than_the_slow_flow_ever_waits_is_not_where_it_waits():
    # a fabric with classes: h2's own link queues the jobs' class 1.8 ms (traffic of no job fills
    # it); the clock's probes, in another class, wait 19 ms across spine1 -> leaf2, a queue of that
    # class alone. Job A's slow flow h2 -> h4 may cross both and waits 1.8 ms: it never met the 19
    def route_wait(route, waits):
        return sum(x for way, x in waits.items() if any(w == way for _, w in route))
    paths = [(s, d, hops(s, d, sp)) for s in TOPO.hosts for d in TOPO.hosts if s[1] != d[1] and s != d
             for sp in ("spine0", "spine1") if any(sp in p.nodes for p in TOPO.paths(s, d))]
    clock = [ProbePath(s, d, r, 12.0, 13.0 + route_wait(r, {"spine1>leaf2": 19_000.0})) for s, d, r in paths]
    in_class = [ProbePath(s, d, r, 12.0, 13.0 + route_wait(r, {"h2>leaf1": 1_800.0}) if s == "h2" else None)
                for s, d, r in paths]
    mesh = Fabric(floors=clock, in_class=in_class, collective_dscp=(26,),
                  link_rates={lk.name: 1e9 for lk in TOPO.links})
    flows = [flow("h2", "h4", "spine1", "A", 5, 1_812.0), flow("h0", "h3", "spine0", "A", 5, 13.0),
             flow("h5", "h1", "spine1", "A", 5, 13.0), flow("h3", "h0", "spine0", "A", 5, 13.0)]
    v = why("A", flows, mesh, NOW, 30 * S)
    assert (v["link"], v["evidence"]["direction"]) == (TOPO.find_link("h2", "leaf1").name, "h2>leaf1"), v["sentence"]


def test_the_link_every_slow_flow_waits_at_outweighs_a_deeper_one_only_some_cross():
    # h0's uplink queues 1.7 ms (another job's bulk flow fills it); its two slow flows wait there,
    # over different spines, 1.9 ms in all. Other hosts' paths into h4 read 2.6 ms more at
    # leaf2 -> h4, the way of only one of the flows (a burst into h4 while they were read): the
    # fit makes it the deeper queue, yet the one cause both flows wait at is h0's uplink
    def route_wait(src, route):
        ways = {w for _, w in route}
        return 1_700.0 * ("h0>leaf0" in ways) + 2_600.0 * ("leaf2>h4" in ways and src != "h0")
    floors = [ProbePath(s, d, r, 12.0, 12.0 + route_wait(s, r))
              for s in TOPO.hosts for d in TOPO.hosts if s[1] != d[1] and s != d
              for sp in ("spine0", "spine1") if any(sp in p.nodes for p in TOPO.paths(s, d))
              for r in (hops(s, d, sp),)]
    flows = [flow("h0", "h4", "spine0", "A", 5, 1_912.0), flow("h0", "h2", "spine1", "A", 5, 1_912.0),
             flow("h3", "h5", "spine0", "A", 5, 13.0), flow("h5", "h3", "spine1", "A", 5, 13.0),
             flow("h1", "h3", "spine1", "A", 5, 13.0)]
    v = why("A", flows, Fabric(floors=floors, link_rates={lk.name: 1e9 for lk in TOPO.links}), NOW, 30 * S)
    suspects = {(lk["link"], lk["direction"]): s["excess_us"] for s in v["evidence"]["localization"]["suspects"]
                for lk in s["links"]}
    down = suspects.get((TOPO.find_link("leaf2", "h4").name, "leaf2->h4"))
    assert down is not None and down > suspects[(TOPO.find_link("h0", "leaf0").name, "h0->leaf0")], suspects
    assert (v["link"], v["evidence"]["direction"]) == (TOPO.find_link("h0", "leaf0").name, "h0>leaf0"), v["sentence"]
