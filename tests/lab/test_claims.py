"""Spine claims through real agents: jobs under one leaf share out its spines.

leafspine(4, 2, 2): h0, h1 under leaf0; h2, h3 under leaf1. The agents on h0 and h1 are
leafmates: what a rank on h0 claims, h1's agent hears within a second.
"""

import time

import pytest

from clockfabric.agent.on_lab import LabAgents
from clockfabric.clock.evaluate import read_states
from clockfabric.collective import CollectiveOptions, claims, run_collective
from clockfabric.lab import netns
from clockfabric.topology import interfaces, leafspine
from tests.conftest import lab_capable
from tests.waiting import wait_for

reason = lab_capable()
pytestmark = [pytest.mark.lab, pytest.mark.skipif(reason is not None, reason=reason or "")]


@pytest.fixture
def lab_with_agents(make_lab):
    lab = make_lab(leafspine(4, 2, 2, host_rate="50mbit"))
    agents = LabAgents(lab, peers=3, extra=["--metrics-port", "0"])
    agents.start()
    try:
        agents.wait_publishing(timeout_s=60)
        yield lab, agents
    finally:
        agents.stop()


def test_a_second_job_under_the_leaf_takes_the_other_spine(lab_with_agents):
    lab, agents = lab_with_agents
    topo = lab.topology
    # the addresses spine0 and spine1 answer a trace from under leaf0 with
    hop = {s: str(interfaces(topo)[topo.find_link("leaf0", s).port(s)].address.ip) for s in ("spine0", "spine1")}
    spines = [hop["spine0"], hop["spine1"]]

    def ask(host, job, n):
        address = str(topo.hosts[host].address)
        with netns.entered(lab.ns(host)):
            return claims.ask((address, claims.AGENT_PORT), job, [(n, spines)], source=address, timeout_s=2)

    assert ask("h0", "A/0", 1) == [[hop["spine0"]]]  # nothing claimed yet: the first offered
    wait_for("h1's agent hearing h0's claim", lambda: "h0" in read_states(agents.state_dir)["h1"]["claims"]["heard"],
             timeout_s=5, every_s=0.2)
    time.sleep(1.2)  # a state file is a second behind: let h0's claim itself arrive too
    assert ask("h1", "B/0", 1) == [[hop["spine1"]]]  # the other job, under the same leaf: the other spine
    address = str(topo.hosts["h0"].address)

    def loads():
        with netns.entered(lab.ns("h0")):
            return claims.loads((address, claims.AGENT_PORT), "A/0", spines, source=address, timeout_s=2)

    wait_for("h0's agent counting a subflow on each spine", lambda: loads() == [1, 1], timeout_s=5, every_s=0.2)
    with netns.entered(lab.ns("h0")):
        claims.release((str(topo.hosts["h0"].address), claims.AGENT_PORT), "A/0", source=str(topo.hosts["h0"].address))
    time.sleep(2.5)  # h0 tells its mates it holds nothing now
    assert ask("h1", "C/0", 2) == [[hop["spine0"], hop["spine0"]]]  # B still holds spine1; A's spine0 is free


def test_a_collective_asks_the_agents_and_stays_correct(lab_with_agents):
    lab, agents = lab_with_agents
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
    time.sleep(1.5)
    states = read_states(agents.state_dir)
    assert all(states[h]["claims"]["placements"] >= 1 for h in lab.topology.hosts), {
        h: s["claims"] for h, s in states.items()}
    assert all(states[h]["claims"]["own"] == [] for h in lab.topology.hosts)  # released at the end
