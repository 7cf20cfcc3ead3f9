"""Failover on a real dual-plane lab: TCP connections survive a NIC flap only with the
agents; a silent spine-link failure is found by heartbeats alone; routes outlive a killed
agent and are adopted by the next one.

Lab: 4 hosts, 2 planes, each plane 2 leaves x 2 spines (h0, h1 under leaf0; h2, h3 under
leaf1). Agents run with a 2 s hold-down so restores fit in a test.

The tests share one lab, in this order: the control without agents first, then the agents start
for the rest; each test waits for traffic back on both planes before it ends, and the one that
kills an agent comes last.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from clockfabric.clock.evaluate import read_states
from clockfabric.lab import impair
from clockfabric.lab.agents import LabAgents
from clockfabric.lab.exec import command
from clockfabric.lab.streams import Mesh
from clockfabric.topology import interfaces, multirail
from tests.waiting import wait_for

HOLD_DOWN_S = 2.0




def failover(lab) -> dict[str, dict]:
    return {h: s["failover"] for h, s in read_states(lab.dir / "agents").items() if "failover" in s}


def kernel_pins(lab, host) -> str:
    out = subprocess.run(command(lab, host, ["ip", "route", "show", "proto", "199"]), capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture(scope="module")
def lab(make_module_lab):
    return make_module_lab(multirail(4, 2, 2, 2))


@pytest.fixture(scope="module")
def agents(lab):
    agents = LabAgents(lab, peers=3, extra=["--metrics-port", "0", "--hold-down", str(HOLD_DOWN_S)])
    agents.start()
    try:
        agents.wait_heartbeats(timeout_s=60)
        yield agents
    finally:
        agents.stop()


def flap_under_streams(lab, port_a, port_b, down_s=7.0):
    mesh = Mesh(lab, sorted(lab.topology.hosts), seconds=down_s + 6, user_timeout_s=3.0, connections=2)
    time.sleep(3.0)
    link = impair.find_link(lab, port_a, port_b)
    t_down = time.time_ns()
    impair.set_link(lab, link, up=False)
    time.sleep(down_s)
    impair.set_link(lab, link, up=True)
    return mesh.wait(60), t_down


def test_without_agents_a_nic_flap_breaks_connections(lab):
    """The control: the same flap as below, no agents. If nothing broke here, the test
    with agents would prove nothing."""
    results, _ = flap_under_streams(lab, "h2:eth0", "p0-leaf1")
    broken = [r for r in results if r["broken"]]
    assert broken, "no connection broke without the agents: the scenario does not bite"
    assert all("h2" in (r["src"], r["peer"]) for r in broken), broken


def test_with_agents_a_nic_flap_breaks_no_connection_and_traffic_returns(lab, agents):
    results, t_down = flap_under_streams(lab, "h2:eth0", "p0-leaf1")
    assert not [r for r in results if r["broken"]], results
    assert all(r["bytes"] > 0 for r in results)
    decisions = failover(lab)
    local = [d for d in decisions["h2"]["decisions"] if d["kind"] == "detected"]
    assert local and all("local eth0 down" in d["reason"] for d in local)
    assert local[0]["t_ns"] - t_down < 1e9, "local failure seen by a link event, not a timeout"
    for peer in ("h0", "h1", "h3"):  # told by h2's heartbeats, they moved their side too
        moved = [d for d in decisions[peer]["decisions"] if d["kind"] == "moved" and d["peer"] == "h2"]
        assert moved and moved[0]["planes"] == [1], (peer, decisions[peer]["decisions"])
    wait_for("traffic back on both planes", lambda: all(not s["pinned"] for s in failover(lab).values()),
             timeout_s=HOLD_DOWN_S + 10)
    assert all(kernel_pins(lab, h) == "" for h in lab.topology.hosts)


def test_a_silent_spine_link_failure_is_found_by_heartbeats(lab, agents):
    leaf0, leaf1 = {"h0", "h1"}, {"h2", "h3"}
    across = {(h, p) for h in leaf0 | leaf1 for p in (leaf1 if h in leaf0 else leaf0)}
    # every host put its heartbeat paths to each peer across the fabric on both spines of each plane
    owner = {str(i.address.ip): i.port.node for i in interfaces(lab.topology).values()}  # a spine answers by address

    def spines(states, h, p, plane):
        return sorted(owner.get(hop, hop) for hop in states[h]["spines"].get(p, {}).get(str(plane), []) if hop)

    placed = wait_for("heartbeat paths placed on spines", lambda: (states := failover(lab)) and all(
        spines(states, h, p, plane) == [f"p{plane}-spine0", f"p{plane}-spine1"]
        for h, p in across for plane in (0, 1)) and states, timeout_s=15)
    assert all(placed[h]["spines"][p]["0"] == [None, None] for h in leaf0 for p in leaf0 - {h})  # no spine between
    link = impair.find_link(lab, "p0-leaf0", "p0-spine0")
    impair.set_link(lab, link, up=False, silent=True)
    try:
        # with a path on each spine, every pair across the fabric sees it, not one by chance
        wait_for("every host moving every cross-leaf peer off plane 0", lambda: (states := failover(lab)) and all(
            states[h]["pinned"].get(p) == [1] for h, p in across), timeout_s=10)
        time.sleep(2.0)
        for h, s in failover(lab).items():  # hosts under one leaf never cross a spine: no reason to move
            same_leaf = leaf0 if h in leaf0 else leaf1
            assert not set(s["pinned"]) & same_leaf, (h, s["pinned"])
    finally:
        impair.set_link(lab, link, up=True)
    wait_for("traffic back on both planes", lambda: all(not s["pinned"] for s in failover(lab).values()),
             timeout_s=HOLD_DOWN_S + 15)


def test_routes_outlive_a_killed_agent_and_the_next_one_adopts_them(lab, agents):
    link = impair.find_link(lab, "h1:eth0", "p0-leaf0")
    impair.set_link(lab, link, up=False)
    wait_for("h1 pinned to plane 1", lambda: len(failover(lab).get("h1", {}).get("pinned", {})) == 3)
    victim = agents.procs[agents.hosts.index("h1")]
    victim.kill()
    victim.wait()
    pins = kernel_pins(lab, "h1")
    assert pins.count("dev eth1") == 3 and "eth0" not in pins  # fail-static: the routes stayed
    ping = subprocess.run(command(lab, "h1", ["ping", "-c", "2", "-W", "1", "-I", str(lab.topology.hosts["h1"].address),
                                              str(lab.topology.hosts["h3"].address)]), capture_output=True)
    assert ping.returncode == 0, "the routes left behind no longer carry traffic"

    state_file = lab.dir / "agents" / "h1.json"
    state_file.unlink()
    argv = [sys.executable, "-m", "clockfabric.cli", "agent", "--lab", lab.name, "--host", "h1", *agents.args]
    again = subprocess.Popen(command(lab, "h1", argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lab.register(again.pid, "clock agent on h1 (restarted)")
    try:
        adopted = wait_for("the new agent adopting the routes", lambda: state_file.exists() and [
            d for d in json.loads(state_file.read_text())["failover"]["decisions"] if d["kind"] == "adopted"])
        assert sorted(d["peer"] for d in adopted) == ["h0", "h2", "h3"]
        impair.set_link(lab, link, up=True)
        wait_for("h1's traffic back on both planes", lambda: kernel_pins(lab, "h1") == "", timeout_s=HOLD_DOWN_S + 15)
    finally:
        again.terminate()
        again.wait(10)
