"""Localization (network tomography) on hand-made paths and generated leaf-spine meshes."""

import math
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clockfabric.localization import INBAND, PROBE, Observation, Verdict, locate
from tests.unit.tomography_meshes import NOW, TIERS, WINDOW, fabric, fault, flow, right, sample

A, B, C, D = ("L1", "a>b"), ("L2", "b>c"), ("L3", "c>d"), ("L4", "b>e")
CASES = 60  # generated meshes per tier for the accuracy figure
MESHES = settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def obs(path, hops, excess, **kw):
    return Observation(path, tuple(hops), excess, **kw)


# ---- rules on hand-made paths -------------------------------------------------------------------

def test_a_path_at_its_floor_clears_its_links_and_the_shared_one_is_named():
    v = locate([obs("p", [A, B], 300.0), obs("q", [A, D], 280.0), obs("r", [B, C], 2.0)])
    (s,) = v.suspects
    assert v.strength == "located" and s.hops == (A,)
    assert s.queued == ("p", "q") and s.excess_us == pytest.approx(290.0)
    assert (B, "r") in s.cleared  # why not its neighbour: r crossed it at its floor


def test_links_no_path_tells_apart_are_named_together():
    v = locate([obs("p", [A, B, C], 300.0), obs("q", [A, B], 300.0), obs("r", [C], 1.0)])
    (s,) = v.suspects
    assert v.strength == "ambiguous" and s.ambiguous and s.hops == (A, B)


def test_the_other_way_of_a_link_is_not_cleared_by_a_quiet_path():
    back = ("L1", "b>a")
    v = locate([obs("p", [A, B], 300.0), obs("q", [A, D], 300.0), obs("r", [back], 1.0), obs("s", [B], 1.0)])
    assert v.first.hops == (A,)


def test_the_smallest_cover_explains_two_queues():
    v = locate([obs("p", [A, B], 300.0), obs("q", [A, D], 300.0), obs("r", [C], 900.0), obs("s", [B], 0.0),
                obs("t", [D], 0.0)])
    assert [s.hops for s in v.suspects] == [(A,), (C,)]
    assert v.suspects[1].excess_us == pytest.approx(900.0)


def test_a_second_queue_behind_one_every_path_crosses_is_found():
    # every queued path crosses A (a sender's uplink); those over B wait there 900 us more. A alone
    # explains them all, but no queue delays some of its paths thrice as much as others
    up, behind, other = ("U", "h>l"), ("L2", "l>s1"), ("L3", "l>s0")
    v = locate([obs("p", [up, behind, ("X", "s1>m")], 1200.0), obs("q", [up, behind, ("Y", "s1>n")], 1190.0),
                obs("r", [up, other, ("Z", "s0>m")], 300.0), obs("s", [up, other, ("W", "s0>n")], 310.0),
                obs("t", [("X", "s1>m")], 1.0), obs("u", [("Y", "s1>n")], 2.0)])
    assert [s.hops for s in v.suspects] == [(up,), (behind,)]
    assert v.suspects[0].excess_us == pytest.approx(305.0, abs=10)
    assert v.suspects[1].excess_us == pytest.approx(890.0, abs=10) and v.suspects[1].queued == ("p", "q")
    # the same paths no more than twice apart (one queue's paths vary) make no second queue
    spread = locate([obs("p", [up, behind], 520.0), obs("r", [up, other], 300.0)])
    assert [s.hops for s in spread.suspects] == [(up,)]


def test_load_that_left_the_window_makes_no_suspect():
    old, new = NOW - 2 * WINDOW, NOW - 1
    v = locate([obs("p", [A, B], 900.0, t_ns=old), obs("p", [A, B], 1.0, t_ns=new),
                obs("q", [A], 900.0, t_ns=old)], NOW, WINDOW)
    assert v.strength == "healthy" and v.suspects == () and v.paths == 1


def test_a_queued_path_whose_links_are_all_cleared_is_unexplained_not_blamed():
    v = locate([obs("p", [A, B], 300.0), obs("q", [A], 0.0), obs("r", [B], 0.0)])
    assert v.strength == "unexplained" and v.suspects == () and v.unexplained == ("p",)
    (lead,) = v.contested  # only a lead: nothing tells its two links apart
    assert lead.hops == (A, B) and lead.against == ("q", "r")


def test_a_queue_read_quiet_by_one_path_is_the_contested_lead():
    # TCP across a slow link fills and drains its queue in turns: r crossed it while it drained.
    # Every link of p, q and s is then cleared; the one most of its paths find queued leads
    v = locate([obs("p", [A, B], 900.0), obs("q", [D, B], 800.0), obs("s", [C, B], 950.0), obs("r", [B], 1.0),
                obs("t", [A], 0.0), obs("u", [D], 0.0), obs("w", [C], 0.0), obs("x", [A, D], 1.0)])
    assert v.strength == "unexplained" and v.suspects == ()
    assert v.contested[0].hops == (B,) and v.contested[0].queued == ("p", "q", "s")


def test_the_callers_judgement_overrides_the_margin():
    v = locate([obs("p", [A, B], 10.0, queued=True), obs("q", [B], 500.0, queued=False)])
    assert v.first.hops == (A,)


def test_an_untraced_flow_may_cross_its_reach_and_clears_nothing():
    v = locate([obs("f", (), 300.0, source=INBAND, reach=(A, B, C)), obs("g", (), 0.0, source=INBAND, reach=(A,)),
                obs("p", [C], 0.0)])
    (s,) = v.suspects
    assert s.hops == (A, B) and s.against == ("g",)  # g may cross A: its floor proves nothing there


# ---- what the evidence lacks ----------------------------------------------------------------------

def test_missing_traces_delays_and_pairs_weaken_the_verdict_and_say_so():
    v = locate([obs("p", [A, B], 300.0, src="h0", dst="h1"), obs("q", [A], 300.0, src="h0", dst="h2"),
                obs("r", [B], 0.0, src="h1", dst="h0"), obs("u", (), 300.0, src="h2", dst="h0"),
                obs("f", [C], None, source=INBAND)])
    assert v.strength == "weak" and v.first.hops == (A,) and v.unexplained == ("u",)
    text = " ".join(v.lacks)
    assert "1 paths with no trace" in text and "1 flows with no in-band delay (f)" in text
    assert "misses 2 of 6 host pairs (h1->h2, h2->h1)" in text


def test_nothing_measured_is_no_evidence():
    assert locate([]).strength == "no_evidence"
    assert locate([obs("f", [A], None, source=INBAND)]).suspects == ()


junk = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.text(max_size=3))
hops = st.lists(st.one_of(st.tuples(st.text(max_size=3), st.text(max_size=3)), st.tuples(st.text(max_size=2)),
                          st.just(("", "x"))), max_size=4).map(tuple)


@given(st.lists(st.builds(Observation, path=st.text(max_size=3), hops=hops, excess_us=junk,
                          source=st.sampled_from([PROBE, INBAND]), t_ns=st.one_of(st.none(), st.integers()),
                          reach=hops, queued=st.one_of(st.none(), st.booleans())), max_size=12),
       st.one_of(st.none(), st.integers(0, 10**12)))
@settings(max_examples=200, deadline=None)
def test_bad_input_never_raises_and_names_only_links_a_queued_path_crosses(observations, window):
    v = locate(observations, NOW if window is not None else None, window)
    crossed = {h for o in observations for h in (*o.hops, *o.reach) if isinstance(h, tuple)}
    assert all(h in crossed for s in v.suspects for h in s.hops)
    assert all(not math.isnan(s.excess_us) for s in v.suspects if s.excess_us is not None)


# ---- generated meshes -----------------------------------------------------------------------------

def accuracy(tier, seed, cases=CASES, **kw):
    rng = random.Random(seed)
    hits = 0
    for _ in range(cases):
        mesh = fabric(rng)
        hop, excess = fault(rng, mesh, tier)
        hits += right(locate(sample(rng, mesh, {hop: excess}, **kw), NOW, WINDOW), hop, mesh.paths)
    return hits / cases


@pytest.mark.parametrize("tier", TIERS)
def test_the_queued_link_is_ranked_first_on_generated_meshes(tier):
    assert accuracy(tier, seed=TIERS.index(tier)) >= 0.95


@given(st.integers(0, 2**32), st.sampled_from(TIERS))
@MESHES
def test_a_queued_link_at_any_tier_is_named_first(seed, tier):
    rng = random.Random(seed)
    mesh = fabric(rng)
    hop, excess = fault(rng, mesh, tier)
    v = locate(sample(rng, mesh, {hop: excess}), NOW, WINDOW)
    assert right(v, hop, mesh.paths), (hop, [s.hops for s in v.suspects[:3]])
    # and the largest queue found (what `job why` names of the suspects on a slow flow's path):
    # no second queue made of noise
    assert hop in max(v.suspects, key=lambda s: s.excess_us or 0.0).hops, [(s.hops, s.excess_us) for s in v.suspects]


@given(st.integers(0, 2**32), st.sampled_from(TIERS[1:3]))
@MESHES
def test_a_queue_behind_a_queued_uplink_is_found_on_generated_meshes(seed, tier):
    rng = random.Random(seed)
    mesh = fabric(rng)
    hop, excess = fault(rng, mesh, tier)
    host = mesh.ends[rng.choice(sorted(mesh.crossing(hop)))][0]  # a sender whose paths cross it
    uplinks = [h for h in mesh.tier_links("host>leaf") if h[1].startswith(f"{host}>")
               and any(h in mesh.paths[n] and hop in mesh.paths[n] for n in mesh.paths)]
    up = rng.choice(uplinks)
    v = locate(sample(rng, mesh, {hop: 3 * excess, up: excess}), NOW, WINDOW)
    found = {h for s in v.suspects for h in s.hops}
    assert hop in found and up in found, [(s.hops, s.excess_us) for s in v.suspects]


@given(st.integers(0, 2**32), st.sampled_from(TIERS))
@MESHES
def test_a_queue_some_paths_read_quiet_leads_the_contested_on_generated_meshes(seed, tier):
    """A quarter of the paths across the queued link sampled it drained: they clear it, and it
    is no suspect; it leads the contested, alone or with links no path tells from it."""
    rng = random.Random(seed)
    mesh = fabric(rng)
    hop, excess = fault(rng, mesh, tier)
    observations = sample(rng, mesh, {hop: excess})
    across = sorted({o.path for o in observations if hop in o.hops})
    drained = set(rng.sample(across, max(1, len(across) // 4)))
    v = locate([replace(o, excess_us=abs(rng.gauss(0, 4.0))) if o.path in drained else o for o in observations],
               NOW, WINDOW)
    assert not any(hop in s.hops for s in v.suspects)
    assert right(Verdict(v.strength, v.contested), hop, mesh.paths), [(s.hops, s.queued) for s in v.contested]


@given(st.integers(0, 2**32))
@MESHES
def test_a_healthy_mesh_names_nothing(seed):
    rng = random.Random(seed)
    mesh = fabric(rng)
    v = locate(sample(rng, mesh, {}), NOW, WINDOW)
    assert v.suspects == () and v.strength in ("healthy", "unexplained", "weak")


@given(st.integers(0, 2**32), st.sampled_from(TIERS))
@MESHES
def test_a_lone_flow_is_located_by_the_mesh_with_no_sibling_over_its_hops(seed, tier):
    rng = random.Random(seed)
    mesh = fabric(rng)
    hop, excess = fault(rng, mesh, tier)
    lone, route = flow(rng, mesh, {hop: excess}, over=hop)
    v = locate([*sample(rng, mesh, {hop: excess}), lone], NOW, WINDOW)
    assert right(v, hop, {**mesh.paths, "flow": route})
    assert "flow" in v.first.queued


@given(st.integers(0, 2**32), st.sampled_from(TIERS))
@MESHES
def test_a_mesh_with_missing_pairs_says_so_and_names_no_cleared_link(seed, tier):
    rng = random.Random(seed)
    mesh = fabric(rng)
    hop, excess = fault(rng, mesh, tier)
    observations = sample(rng, mesh, {hop: excess}, drop=0.3)
    v = locate(observations, NOW, WINDOW)
    assert any("probe mesh misses" in line for line in v.lacks) and v.strength != "located"
    quiet = {h for o in observations if o.excess_us < 25 for h in o.hops}
    assert not {h for s in v.suspects for h in s.hops} & quiet
    assert v.first is None or hop in v.first.hops or v.unexplained
