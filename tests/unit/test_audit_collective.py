"""collective.allreduce judged with the collective's launcher replaced by a stand-in whose
busbw comes from a rule (the real launcher runs in tests/lab/test_audit.py): which rings run,
in what order, with what message sizes, and what a slow link or a one-off hiccup leads to."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from clockfabric.audit import expect
from clockfabric.audit.bisect import auto_size, ring_order
from clockfabric.audit.checks.collective_allreduce import run
from clockfabric.audit.context import Context
from clockfabric.collective import run as collective_run
from clockfabric.collective.expected import expected_busbw_gbps
from clockfabric.errors import ClockfabricError
from clockfabric.topology import multirail, parse_rate


def context(hosts: int = 8, leaves: int = 2, rate: str = "25mbit", **collective) -> Context:
    topo = multirail(hosts, 2, leaves, 2, host_rate=rate)
    cfg = expect.defaults()
    cfg["collective"].update(collective)
    return Context(topo, sorted(topo.hosts), {h: {} for h in topo.hosts}, {}, expect=cfg,
                   machines=SimpleNamespace(name="stand-in", topology=topo))


@pytest.fixture
def fabric(monkeypatch):
    """A stand-in all-reduce at 90% of expected; 25% through a slow (host, plane); 30% for
    a ring of more than two hosts on a `slow_ring` plane (the fabric between the leaves); the
    first `hiccups` calls at 50%. Every call is recorded."""
    state = {"slow": None, "slow_ring": None, "hiccups": 0, "calls": []}

    def allreduce(lab, hosts, *, sizes, subflows, planes, algorithm="ring", iters, timeout_s):
        planes = planes if planes is not None else list(lab.topology.planes)
        state["calls"].append({"hosts": list(hosts), "size": sizes[0], "subflows": subflows, "planes": planes,
                               "algorithm": algorithm})
        expected = expected_busbw_gbps(lab.topology, hosts, subflows, planes, algorithm=algorithm)
        ratio = 0.9
        if state["slow"] and state["slow"][0] in hosts and state["slow"][1] in planes:
            ratio = 0.25
        elif state["slow_ring"] in planes and len(hosts) > 2:
            ratio = 0.3
        elif state["hiccups"]:
            state["hiccups"] -= 1
            ratio = 0.5
        row = SimpleNamespace(size_bytes=sizes[0], time_us=1.0, busbw_gbps=expected * ratio, wrong=0)
        return SimpleNamespace(rows=[row], planes=planes, expected_busbw_gbps=expected,
                               ratio=lambda r: r.busbw_gbps / expected)

    monkeypatch.setattr(collective_run, "allreduce", allreduce)
    return state


def verdicts(outcome) -> set[tuple[str, str, str]]:
    return {(f.verdict.value, f.host, f.device) for f in outcome.findings}


def test_a_clean_fabric_passes_with_one_ring_per_plane_in_leaf_order(fabric):
    ctx = context(32, leaves=4, rate="5mbit")
    outcome = run(ctx)
    assert verdicts(outcome) == {("pass", "", "")}
    rings = [c for c in fabric["calls"] if len(c["hosts"]) == 32]
    assert [c["planes"] for c in rings] == [[0], [1]]  # one plane at a time, each once
    for c in rings:  # leaf by leaf: h0..h7 under leaf 0, then h8..h15 (sorted names would zigzag)
        leaf_of = [int(h[1:]) * 4 // 32 for h in c["hosts"]]
        assert leaf_of == sorted(leaf_of)
    assert not [c for c in fabric["calls"] if len(c["hosts"]) == 2]  # no bisect
    assert {len(c["hosts"]) for c in fabric["calls"]} == {32, 8}  # the sweep on an 8-host sample


def test_message_sizes_come_from_link_rates(fabric):
    outcome_sizes = {}
    for rate in ("5mbit", "25mbit"):
        fabric["calls"].clear()
        run(context(8, rate=rate))
        outcome_sizes[rate] = [c["size"] for c in fabric["calls"]]
    # each ring step moves step_ms (25 ms) of link time: 8 segments of rate/8 bytes/s x 25 ms
    ring = outcome_sizes["25mbit"][0]
    assert ring == pytest.approx(8 * parse_rate("25mbit") / 8 * 0.025, rel=1e-3)
    assert ring % (4 * 8) == 0
    assert [s * 5 for s in outcome_sizes["5mbit"]] == pytest.approx(outcome_sizes["25mbit"], rel=1e-3)
    # subflows over both planes double the expected busbw, and the size with it
    sweep = {(c["algorithm"], c["subflows"]): c["size"] for c in fabric["calls"][2:]}
    assert sweep[("ring", 2)] == pytest.approx(2 * sweep[("ring", 1)], rel=1e-3)


def test_auto_size_bounds():
    topo = multirail(4, 2, 2, 2, host_rate="1kbit")
    assert auto_size(topo, ["h0", "h1", "h2", "h3"], 1, [0], "ring", 0.025) == 16  # one float per segment
    topo = multirail(4, 2, 2, 2, host_rate="400gbit")
    assert auto_size(topo, ["h0", "h1", "h2", "h3"], 1, [0], "ring", 10.0) == 1 << 30


def test_ring_order_groups_by_leaf():
    topo = multirail(32, 2, 4, 2)
    order = ring_order(topo, sorted(topo.hosts), 1)
    assert sorted(order) == sorted(topo.hosts)
    assert order[:8] == ["h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7"]


def test_a_hiccup_is_bisected_then_measured_again_and_nothing_is_named(fabric):
    fabric["hiccups"] = 1
    ctx = context()
    outcome = run(ctx)
    assert verdicts(outcome) == {("pass", "", "")}
    plane0 = ctx.derived["collective.per_plane"][0]
    assert plane0["first_ratio"] == 0.5 and plane0["ratio"] == 0.9
    calls = fabric["calls"]
    pairs = [i for i, c in enumerate(calls) if len(c["hosts"]) == 2]
    rings0 = [i for i, c in enumerate(calls) if len(c["hosts"]) == 8 and c["planes"] == [0]]
    assert pairs and all(calls[i]["planes"] == [0] for i in pairs)
    assert len(rings0) == 2 and rings0[0] < pairs[0] and pairs[-1] < rings0[1]  # every pair at rate: the ring again


def test_a_ring_short_twice_with_every_pair_at_rate_names_the_fabric_between_the_leaves(fabric):
    fabric["slow_ring"] = 1
    ctx = context()
    outcome = run(ctx)
    fails = [f for f in outcome.findings if f.verdict.value == "fail"]
    assert [(f.host, f.device) for f in fails] == [("", "")], verdicts(outcome)
    assert "every pair is at rate: the fabric between leaves" in fails[0].message
    plane1 = ctx.derived["collective.per_plane"][1]
    assert plane1["first_ratio"] == 0.3 and plane1["ratio"] == 0.3


def test_a_quarter_rate_link_fails_naming_its_nic_only(fabric):
    fabric["slow"] = ("h5", 1)
    ctx = context()
    outcome = run(ctx)
    assert {v for v in verdicts(outcome) if v[0] == "fail"} == {("fail", "h5", "eth1")}
    plane0, plane1 = ctx.derived["collective.per_plane"]
    assert plane0["ratio"] == 0.9 and plane1["ratio"] == 0.25 and "first_ratio" not in plane1
    # the bisect's own re-tests are the repeat: the slow ring (4x as long) runs once
    assert len([c for c in fabric["calls"] if len(c["hosts"]) == 8 and c["planes"] == [1]]) == 1
    pairs = [c for c in fabric["calls"] if len(c["hosts"]) == 2]
    assert pairs and all(c["planes"] == [1] for c in pairs)  # only the short plane is bisected
    # pair tests too take their size from the rate: 2 segments, PAIR_STEP_S of link time each
    assert all(c["size"] == auto_size(ctx.topology, c["hosts"], 1, [1], "ring", 0.4) for c in pairs)
    # the sweep comes after the bisect and leaves the named host out, in equal groups per leaf (hier)
    sweep = [c for c in fabric["calls"] if len(c["hosts"]) > 2 and c["planes"] == [0, 1]]
    assert len(sweep) == 8 and all(c["hosts"] == ["h0", "h1", "h2", "h4", "h6", "h7"] for c in sweep)
    assert fabric["calls"].index(sweep[0]) > fabric["calls"].index(pairs[-1])


@pytest.mark.parametrize("step_ms, pair_step_s", [(100.0, 0.4), (1000.0, 1.0)])
def test_pair_steps_are_400_ms_unless_ring_steps_are_longer(fabric, step_ms, pair_step_s):
    fabric["slow"] = ("h5", 1)
    ctx = context(step_ms=step_ms)
    run(ctx)
    pairs = [c for c in fabric["calls"] if len(c["hosts"]) == 2]
    assert pairs and all(c["size"] == auto_size(ctx.topology, c["hosts"], 1, [1], "ring", pair_step_s)
                         for c in pairs)


def test_a_written_size_is_used_everywhere(fabric):
    fabric["slow"] = ("h2", 0)
    run(context(size="1M"))
    assert {c["size"] for c in fabric["calls"]} == {1 << 20}


@pytest.mark.parametrize("collective, message", [
    ({"size": "lots"}, "collective.size: size 'lots' does not parse"),
    ({"step_ms": 0}, "collective.step_ms must be above 0"),
])
def test_bad_collective_expectations_are_one_line(collective, message):
    with pytest.raises(ClockfabricError, match=message):
        expect.parse({"collective": collective})
