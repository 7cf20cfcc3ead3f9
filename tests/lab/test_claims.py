"""Spine claims through real agents: jobs under one leaf share out its spines.

leafspine(4, 2, 2): h0, h1 under leaf0; h2, h3 under leaf1. The agents on h0 and h1 are
leafmates: what a rank on h0 claims, h1's agent hears within a second. The two tests share the
lab and its agents: each releases what it claimed, and the second waits for the leaf to be free.
"""

import pytest

from clockfabric.clock.evaluate import read_states
from clockfabric.collective import CollectiveOptions, claims, run_collective
from clockfabric.lab import netns
from clockfabric.lab.agents import LabAgents
from clockfabric.topology import interfaces, leafspine
from tests.conftest import lab_capable
from tests.waiting import wait_for

reason = lab_capable()
pytestmark = [pytest.mark.lab, pytest.mark.skipif(reason is not None, reason=reason or "")]


@pytest.fixture(scope="module")
def lab_with_agents(make_module_lab):
    lab = make_module_lab(leafspine(4, 2, 2, host_rate="50mbit"))
    agents = LabAgents(lab, peers=3, extra=["--metrics-port", "0"])
    agents.start()
    try:
        agents.wait_publishing(timeout_s=60)
        yield lab, agents
    finally:
        agents.stop()


def spine_hops(lab) -> list[str]:
    """The addresses spine0 and spine1 answer a trace from under leaf0 with."""
    topo = lab.topology
    return [str(interfaces(topo)[topo.find_link("leaf0", s).port(s)].address.ip) for s in ("spine0", "spine1")]


def on(lab, host, call, *args, **kw):
    """A claims call to `host`'s agent, from `host`, as a rank there makes it."""
    address = str(lab.topology.hosts[host].address)
    with netns.entered(lab.ns(host)):
        return call((address, claims.AGENT_PORT), *args, source=address, **kw)


def test_a_second_job_under_the_leaf_takes_the_other_spine(lab_with_agents):
    lab, agents = lab_with_agents
    spines = spine_hops(lab)

    def ask(host, job, n):
        return on(lab, host, claims.ask, job, [(n, spines)], timeout_s=2)

    def loads(host):  # the subflows jobs under the leaf hold on spine0 and spine1, as `host`'s agent counts them
        return on(lab, host, claims.loads, "probe/0", spines, timeout_s=2)

    assert ask("h0", "A/0", 1) == [[spines[0]]]  # nothing claimed yet: the first offered
    wait_for("h1's agent hearing h0's claim", lambda: "h0" in read_states(agents.state_dir)["h1"]["claims"]["heard"],
             timeout_s=5, every_s=0.2)
    wait_for("h1's agent counting h0's claim on spine0", lambda: loads("h1") == [1, 0], timeout_s=5, every_s=0.1)
    assert ask("h1", "B/0", 1) == [[spines[1]]]  # the other job, under the same leaf: the other spine
    wait_for("h0's agent counting a subflow on each spine", lambda: loads("h0") == [1, 1], timeout_s=5, every_s=0.2)
    on(lab, "h0", claims.release, "A/0")
    # h0 tells its mates it holds nothing now: only B's subflow on spine1 is left
    wait_for("h1's agent hearing h0's release", lambda: loads("h1") == [0, 1], timeout_s=5, every_s=0.1)
    assert ask("h1", "C/0", 2) == [[spines[0], spines[0]]]  # B still holds spine1; A's spine0 is free
    for job in ("B/0", "C/0"):  # the leaf left free for the next test
        on(lab, "h1", claims.release, job)


def test_a_collective_asks_the_agents_and_stays_correct(lab_with_agents):
    lab, agents = lab_with_agents
    spines = spine_hops(lab)
    wait_for("no claim left under leaf0", lambda: all(
        on(lab, h, claims.loads, "probe/0", spines, timeout_s=2) == [0, 0] for h in ("h0", "h1")), timeout_s=10)
    placed_before = {h: s["claims"]["placements"] for h, s in read_states(agents.state_dir).items()}
    budget = 64 << 10
    options = CollectiveOptions(subflows=2, scheduler="owd", iters=1, warmup=1, timeout_s=30, rcvbuf=48 << 10,
                                rcvbuf_budget=budget)
    res = run_collective(lab, ["h0", "h2", "h1", "h3"], options, sizes=[1 << 20])
    assert res.ok, res.rows
    # each rank sends to its right-hand neighbour, across the spines: those subflows get their share
    # of the budget, split on each spine from under a leaf between its 2 ranks (all of it while a
    # rank's agent has not heard of the other's claim yet). The subflows to the left neighbour
    # carry only the barrier's bytes: not counted, they keep rcvbuf.
    right = {"h0": "h2", "h2": "h1", "h1": "h3", "h3": "h0"}
    asked = [(host, row["peer"] == right[host], row["peer_rcvbuf"])
             for host, rows in res.subflow_stats.items() for row in rows]
    assert len(asked) == 16, asked  # 4 ranks, 2 neighbours each, 2 subflows to each
    for host, sends, size in asked:
        assert size in ({budget // 2, budget} if sends else {48 << 10}), (host, sends, size)
    # every rank asked its agent, and released its claims at the end (a state file is a second behind)
    wait_for("every agent placing subflows and holding no claim after", lambda: (
        states := read_states(agents.state_dir)) and all(
        states[h]["claims"]["placements"] > placed_before[h] and states[h]["claims"]["own"] == []
        for h in lab.topology.hosts), timeout_s=10, every_s=0.2)
