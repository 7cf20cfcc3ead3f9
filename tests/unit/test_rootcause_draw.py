"""bench rootcause's draw: shapes within their ranges, every class reachable, the fault's link
and tier those of the victim's path, jobs that fit the fabric; and its report's figures."""

from __future__ import annotations

from collections import Counter

from clockfabric.bench.rootcause.case import judge
from clockfabric.bench.rootcause.draw import (
    CLASSES,
    FABRIC_BPS,
    FLOW_BPS,
    LOAD_SHARE,
    OVERFILL,
    TIERS,
    Case,
    Fault,
    draw,
    hops,
    leaf_of,
    link_name,
    offered,
    tier_of,
    twins,
)
from clockfabric.bench.rootcause.report import confusion_table, p90, summary

CASES = [draw(seed, i) for seed in (1, 77) for i in range(60)]


def test_shapes_stay_within_their_ranges_and_replay():
    for c in CASES:
        assert 4 <= c.hosts <= 12 and 2 <= c.leaves <= 4 and 2 <= c.spines <= 4 and 1 <= c.planes <= 2
        assert 1 <= len(c.jobs) <= 3 and all(len(j.flows) <= 8 for j in c.jobs) and len(c.jobs[0].flows) >= 1
        assert c.jobs[0].style == "paced" and all(j.style in ("paced", "bulk") for j in c.jobs)
    assert draw(1, 5) == CASES[5]  # the seed and the index replay a case
    assert {c.planes for c in CASES} == {1, 2} and {c.classes for c in CASES} == {True, False}
    assert {j.style for c in CASES for j in c.jobs[1:]} == {"paced", "bulk"}


def test_every_class_and_tier_is_reached():
    assert set(Counter(c.fault.kind for c in CASES)) == set(CLASSES)
    assert set(TIERS) <= {c.fault.tier for c in CASES}


def test_the_fault_link_is_on_the_victims_path_at_its_tier():
    for c in CASES:
        f = c.fault
        if f.link is None:
            assert f.tier in ("host", "-")
            continue
        victim = c.jobs[0].flows[f.victim]
        a, b = f.direction.split(">")
        assert (a, b) in hops(victim, c.hosts, c.leaves, c.planes)
        assert tier_of(a, b) == f.tier and {a, b} == set(f.link.split("--")[0].split(":")[:1]
                                                          + f.link.split("--")[1].split(":")[:1])
        assert {lk.name for lk in c.topology().links} >= {f.link}


def test_jobs_fit_the_fabric_and_cross_a_spine():
    for c in CASES:
        load: Counter = Counter()
        for j in c.jobs:
            assert len({(f.src, f.dst) for f in j.flows}) == len(j.flows)  # one flow group a pair
            for fl in j.flows:
                assert leaf_of(fl.src, c.hosts, c.leaves) != leaf_of(fl.dst, c.hosts, c.leaves)
                assert len(hops(fl, c.hosts, c.leaves, c.planes)) == 4
                load.update(hops(fl, c.hosts, c.leaves, c.planes))
        assert all(n * FLOW_BPS <= LOAD_SHARE * FABRIC_BPS for h, n in load.items() if "host" not in tier_of(*h))


def test_culprits_queue_the_victim_at_the_fault_link():
    for c in (c for c in CASES if c.fault.kind.startswith("congestion")):
        for culprit in c.fault.culprits:
            assert tuple(c.fault.direction.split(">")) in hops(culprit, c.hosts, c.leaves, c.planes)
    misplaced = [c for c in CASES if c.fault.kind == "misconfigured_interface"]
    assert all(c.planes == 2 and c.fault.culprits[0].plane != c.jobs[0].flows[c.fault.victim].plane
               for c in misplaced)
    assert all(c.classes for c in CASES if c.fault.kind == "misconfigured_class")


def test_culprits_can_overfill_the_fault_link_whatever_the_links_before_it_let_through():
    into_h0, down = ("leaf0", "h0"), ("spine0", "leaf1")
    # one sender's uplink carries no more than the host link it means to fill; two senders do
    assert offered([[("h2", "leaf0"), into_h0]], into_h0) == 100e6
    assert offered([[("h2", "leaf0"), into_h0], [("h2", "leaf0"), into_h0]], into_h0) == 100e6
    assert offered([[("h2", "leaf0"), into_h0], [("h3", "leaf0"), into_h0]], into_h0) == 200e6
    # two hosts under one leaf share its uplink; a flow from the link's own sender is unbounded
    both = [[(h, "leaf2"), ("leaf2", "spine0"), down] for h in ("h4", "h5")]
    assert offered(both, down) == FABRIC_BPS and offered([[down]], down) == float("inf")
    for c in (c for c in CASES if c.fault.kind.startswith("congestion")):
        target = tuple(c.fault.direction.split(">"))
        own = sum(FLOW_BPS for f in c.jobs[0].flows if target in hops(f, c.hosts, c.leaves, c.planes))
        paths = [hops(f, c.hosts, c.leaves, c.planes) for f in c.fault.culprits]
        rate = FABRIC_BPS if "host" not in c.fault.tier else 100e6
        assert offered(paths, target) + own > OVERFILL * rate, c


def row(kind, tier, verdict, right, named_s=None, named_right=None):
    return {"kind": kind, "tier": tier, "verdict": verdict, "right": right, "named_s": named_s,
            "named_right": right if named_right is None else named_right, "cost_s": 10.0}


def test_report_figures_per_class_tier_and_confusion():
    rows = [row("degraded_link", "leaf->spine", "degraded_link", True, 4.0),
            row("degraded_link", "host->leaf", "congestion_own", False, named_right=True),
            row("congestion_non_job", "leaf->spine", "congestion_non_job", True, 6.0),
            row("healthy", "-", "healthy", True), row("healthy", "-", "congestion_own", False),
            row("straggler_host", "host", None, False)]
    found = summary(rows)
    assert found["cases"] == 6 and found["right"] == 3 and found["right_percent"] == 50.0
    assert found["per_class"]["degraded_link"] == {"cases": 2, "right": 1, "percent": 50.0}
    assert found["per_tier"]["leaf->spine"]["percent"] == 100.0 and "-" not in found["per_tier"]
    assert found["worst_class_percent"] == 0.0 and found["worst_tier_percent"] == 0.0
    assert found["healthy_false_verdicts"] == 1 and found["named_p90_s"] == 6.0
    assert found["queued_cases"] == 3 and found["located_percent"] == 100.0
    assert found["confusion"]["healthy"] == {"healthy": 1, "congestion_own": 1}
    assert found["confusion"]["straggler_host"] == {"(none)": 1}
    table = confusion_table(found["confusion"])
    assert [c.header for c in table.columns][0] == "truth" and len(table.rows) == 4


def test_a_verdict_naming_links_it_cannot_tell_apart_is_not_right_though_the_fault_is_among_them():
    case = next(c for c in CASES if c.fault.kind == "degraded_link")
    one = judge(case, {"verdict": "degraded_link", "link": case.fault.link, "links": [case.fault.link]})
    both = judge(case, {"verdict": "degraded_link", "link": None, "links": ["other", case.fault.link]})
    assert (one["right"], one["named_among"]) == (True, False)
    assert (both["class_right"], both["named_right"], both["right"], both["named_among"]) == (True, False, False, True)
    found = summary([{**r, "kind": "degraded_link", "tier": case.fault.tier, "cost_s": 1.0} for r in (one, both)])
    assert (found["right"], found["ambiguous"], found["ambiguous_with_truth"]) == (1, 1, 1)


def test_a_queue_no_path_tells_from_its_twin_is_named_right_only_with_it():
    # two leaves: every path up leaf0 -> spine0 comes down spine0 -> leaf1, and no other path does
    fault = Fault("degraded_link", "leaf->spine", 0, direction="leaf0>spine0")
    case = Case(0, 0, 6, 2, 2, 1, False, (), fault)
    assert twins(case, ("leaf0", "spine0")) == {("leaf0", "spine0"), ("spine0", "leaf1")}
    assert twins(case, ("h0", "leaf0")) == {("h0", "leaf0")} and twins(case, ("spine1", "leaf0")) == {
        ("spine1", "leaf0"), ("leaf1", "spine1")}
    three = Case(0, 0, 6, 3, 2, 1, False, (), fault)  # a third leaf's paths part them
    assert twins(three, ("leaf0", "spine0")) == {("leaf0", "spine0")}

    topo = case.topology()
    up, down = link_name(topo, "leaf0", "spine0"), link_name(topo, "spine0", "leaf1")
    case = Case(0, 0, 6, 2, 2, 1, False, (), Fault("degraded_link", "leaf->spine", 0, up, "leaf0>spine0"))
    pair = judge(case, {"verdict": "degraded_link", "link": None, "links": [down, up]})
    alone = judge(case, {"verdict": "degraded_link", "link": up, "links": [up]})
    wider = judge(case, {"verdict": "degraded_link", "link": None, "links": [down, up, link_name(topo, "h0", "leaf0")]})
    assert (pair["right"], pair["named_among"]) == (True, False)
    assert (alone["right"], wider["right"], wider["named_among"]) == (False, False, True)
    # a flap is named by its carrier, not by delays: its link alone is right
    flap = Case(0, 0, 6, 2, 2, 1, False, (), Fault("flapping_link", "leaf->spine", 0, up, "leaf0>spine0"))
    assert judge(flap, {"verdict": "flapping_link", "link": up, "links": [up]})["right"]


def test_p90_is_the_nearest_rank():
    assert p90([]) is None and p90([3.0]) == 3.0
    assert p90([float(i) for i in range(1, 11)]) == 9.0 and p90([float(i) for i in range(1, 21)]) == 18.0
