"""The failover decision logic on event sequences: leave at once, come back after a
hold-down, damp a plane that keeps failing, never thrash when nothing works."""

from clockfabric.traffic.decide import Decider, PlaneState, Policy

POLICY = Policy(hold_down_s=5.0, penalty=1.0, half_life_s=30.0, suppress=3.0, reuse=1.0)
BOTH = {0: True, 1: True}
PLANE0_DOWN = {0: False, 1: True}


def kinds(decisions):
    return [(d.kind, d.planes) for d in decisions]


def run(decider, peer, timeline):
    """timeline: (t, health) pairs; returns every decision made."""
    out = []
    for t, health in timeline:
        out += decider.observe(t, peer, health)
    return out


def test_a_failure_moves_traffic_at_once_and_restores_after_the_hold_down():
    d = Decider((0, 1), POLICY)
    assert d.observe(0.0, "h1", BOTH) == []
    assert kinds(d.observe(0.1, "h1", PLANE0_DOWN)) == [("detected", (0,)), ("moved", (1,))]
    assert d.pinned() == {"h1": (1,)}
    assert d.observe(1.0, "h1", BOTH) == []  # healthy again, but not for long enough
    assert d.observe(5.9, "h1", BOTH) == []
    assert kinds(d.observe(6.0, "h1", BOTH)) == [("restored", (0,)), ("moved", (0, 1))]
    assert d.pinned() == {}


def test_a_blip_during_the_hold_down_starts_it_again():
    d = Decider((0, 1), POLICY)
    run(d, "h1", [(0.0, PLANE0_DOWN), (1.0, BOTH), (4.0, PLANE0_DOWN), (4.5, BOTH)])
    assert d.observe(9.0, "h1", BOTH) == []  # 4.5 s healthy, not 5
    assert kinds(d.observe(9.5, "h1", BOTH)) == [("restored", (0,)), ("moved", (0, 1))]


def test_ten_flaps_in_a_minute_are_damped_one_move_out_one_back():
    d = Decider((0, 1), POLICY)
    timeline = []
    for i in range(10):  # 3 s down, 3 s up
        timeline += [(6.0 * i + x / 10, PLANE0_DOWN) for x in range(30)]
        timeline += [(6.0 * i + 3 + x / 10, BOTH) for x in range(30)]
    decisions = run(d, "h1", timeline)
    assert kinds(decisions)[:2] == [("detected", (0,)), ("moved", (1,))]
    assert ("damped", (0,)) in kinds(decisions)
    assert [k for k, _ in kinds(decisions)].count("moved") == 1  # never back while it flaps
    state = d.state("h1", 0)
    assert state.damped and not state.in_use
    # quiet afterwards: the penalty decays below reuse, then the hold-down, then back
    t, back = 60.0, None
    while back is None and t < 300:
        t += 0.5
        if any(x.kind == "moved" for x in d.observe(t, "h1", BOTH)):
            back = t
    assert back is not None and back > 60 + POLICY.hold_down_s
    assert state.penalty(back) < POLICY.reuse
    assert d.pinned() == {}


def test_no_plane_working_leaves_routes_alone():
    d = Decider((0, 1), POLICY)
    out = run(d, "h1", [(0.0, PLANE0_DOWN), (0.1, {0: False, 1: False}), (0.2, {0: False, 1: False})])
    assert kinds(out) == [("detected", (0,)), ("moved", (1,)), ("detected", (1,)), ("unreachable", ())]
    assert d.pinned() == {"h1": (1,)}  # still where it was: no move to a dead plane, no thrash
    out = run(d, "h1", [(t / 10, {0: False, 1: True}) for t in range(3, 100)])
    assert ("reachable", (1,)) in kinds(out)
    assert d.pinned() == {"h1": (1,)}  # plane 1 back after its hold-down; plane 0 still down
    assert [k for k, _ in kinds(out)].count("moved") == 0


def test_adopted_routes_wait_for_a_healthy_hold_down():
    d = Decider((0, 1), POLICY)
    d.adopt("h1", (1,), 0.0)
    assert d.pinned() == {"h1": (1,)}
    assert d.observe(0.1, "h1", BOTH) == []
    assert d.observe(5.0, "h1", BOTH) == []
    assert kinds(d.observe(5.1, "h1", BOTH)) == [("restored", (0,)), ("moved", (0, 1))]


def test_penalty_decays_with_its_half_life():
    st = PlaneState(POLICY)
    st.observe(0.0, False)
    assert st.penalty(0.0) == 1.0
    assert abs(st.penalty(30.0) - 0.5) < 1e-9
    assert not st.damped
