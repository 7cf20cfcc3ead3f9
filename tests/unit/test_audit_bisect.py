"""Bisecting a slow plane down to a NIC, with the collective's launcher replaced by a stand-in
that knows which host is slow (the real launcher runs in tests/lab/test_audit.py)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from clockfabric.audit import expect
from clockfabric.audit.bisect import PAIRS_AT_ONCE, pair_up, slow_nics
from clockfabric.audit.context import Context
from clockfabric.collective import run as collective_run
from clockfabric.topology import multirail


def context(hosts: int) -> Context:
    topo = multirail(hosts, 1, 2, 1)
    return Context(topo, sorted(topo.hosts), {h: {} for h in topo.hosts}, {}, expect=expect.defaults(),
                   machines=SimpleNamespace(name="stand-in"))


@pytest.fixture
def slow_host(monkeypatch):
    """Pair tests through `slow` run at a quarter of the rate; every call is recorded."""
    calls = []
    state = {"slow": None, "slow_pair": None, "hiccups": set(), "running": 0, "most": 0}
    lock = threading.Lock()

    def allreduce(lab, hosts, **kw):
        with lock:
            calls.append(tuple(hosts))
            state["running"] += 1
            state["most"] = max(state["most"], state["running"])
        time.sleep(0.01)  # long enough for pairs started together to overlap
        ratio = 1.0
        if state["slow"] in hosts or set(hosts) == state["slow_pair"]:
            ratio = 0.25
        elif tuple(hosts) in state["hiccups"]:  # slow this once only
            state["hiccups"].discard(tuple(hosts))
            ratio = 0.7
        with lock:
            state["running"] -= 1
        return SimpleNamespace(rows=[SimpleNamespace()], ratio=lambda row: ratio)

    monkeypatch.setattr(collective_run, "allreduce", allreduce)
    state["calls"] = calls
    return state


def test_pairs_stay_under_one_leaf_first():
    ctx = context(5)  # leaf0: h0 h1 h2, leaf1: h3 h4
    assert pair_up(ctx, ctx.hosts, 0) == [("h0", "h1"), ("h3", "h4")]


@pytest.mark.parametrize("slow", ["h0", "h3", "h4", "h2"])  # h2 is the odd host out
def test_the_slow_host_is_found_and_only_it(slow_host, slow):
    slow_host["slow"] = slow
    ctx = context(5)
    found = slow_nics(ctx, ctx.hosts, 0, 1 << 20)
    assert list(found) == [(slow, "eth0")]
    assert found[(slow, "eth0")]["ratio"] == 0.25
    assert all(t["ratio"] == 0.25 for t in found[(slow, "eth0")]["tests"])


def test_a_healthy_plane_needs_one_round(slow_host):
    ctx = context(4)
    assert slow_nics(ctx, ctx.hosts, 0, 1 << 20) == {}
    assert len(slow_host["calls"]) == 2  # two pairs, nothing to re-test


def test_a_hiccup_in_a_pair_test_blames_nobody(slow_host):
    slow_host["hiccups"] = {("h0", "h1")}  # slow in round 1, at rate with other partners and alone again
    ctx = context(6)
    assert slow_nics(ctx, ctx.hosts, 0, 1 << 20) == {}
    assert slow_host["calls"].count(("h0", "h1")) == 2  # tested again alone before its path was blamed


def test_a_slow_path_between_two_hosts_blames_both_ends(slow_host):
    slow_host["slow_pair"] = {"h0", "h1"}  # each end is at rate with anyone else
    ctx = context(6)
    found = slow_nics(ctx, ctx.hosts, 0, 1 << 20)
    assert set(found) == {("h0", "eth0"), ("h1", "eth0")}
    assert [t["ratio"] for t in found[("h0", "eth0")]["tests"]] == [0.25, 0.25]  # round 1, and alone again


def test_pair_tests_under_one_leaf_run_a_few_at_a_time(slow_host):
    topo = multirail(32, 1, 1, 0)  # one leaf: 16 pairs that share no link
    ctx = Context(topo, sorted(topo.hosts), {h: {} for h in topo.hosts}, {}, expect=expect.defaults(),
                  machines=SimpleNamespace(name="stand-in"))
    assert slow_nics(ctx, ctx.hosts, 0, 1 << 20) == {}
    assert len(slow_host["calls"]) == 16
    assert 1 < slow_host["most"] <= PAIRS_AT_ONCE
