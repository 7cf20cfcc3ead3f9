"""Bisecting a slow plane down to a NIC, with the collective's launcher replaced by a stand-in
that knows which host is slow (the real launcher runs in tests/lab/test_audit.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from clockfabric.audit import expect
from clockfabric.audit.bisect import pair_up, slow_nics
from clockfabric.audit.context import Context
from clockfabric.collective import run as collective_run
from clockfabric.topology import multirail


def context(hosts: int) -> Context:
    topo = multirail(hosts, 1, 2, 1)
    return Context(topo, sorted(topo.hosts), {h: {} for h in topo.hosts}, {}, expect=expect.defaults(),
                   lab=SimpleNamespace(name="stand-in"))


@pytest.fixture
def slow_host(monkeypatch):
    """Pair tests through `slow` run at a quarter of the rate; every call is recorded."""
    calls = []
    state = {"slow": None}

    def allreduce(lab, hosts, **kw):
        calls.append(tuple(hosts))
        ratio = 0.25 if state["slow"] in hosts else 1.0
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
