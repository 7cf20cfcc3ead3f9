"""agent.fanout: a message to each of many hosts, spread out in time, the newest per host; those
due close together leave in one wake."""

from __future__ import annotations

import math

import pytest

from clockfabric.agent.fanout import WAKE_S, Fanout


def fanout(hosts: int = 4, spread_s: float = 0.2) -> tuple[Fanout, list[tuple[str, dict]]]:
    sent: list[tuple[str, dict]] = []
    return Fanout(lambda h, m: sent.append((h, m)), hosts, spread_s), sent


def test_one_message_a_host_leaves_gap_apart_in_the_order_put():
    out, sent = fanout(hosts=4, spread_s=0.2)  # 50 ms apart
    for h in ("h1", "h2", "h3", "h4"):
        out.put(h, {"to": h})
    assert out.flush(10.0) == pytest.approx(10.05) and [h for h, _ in sent] == ["h1"]
    assert out.flush(10.049) == pytest.approx(10.05) and len(sent) == 1  # not before its time
    assert out.flush(10.05) == pytest.approx(10.10) and [h for h, _ in sent] == ["h1", "h2"]
    assert out.flush(10.20) == math.inf  # a late wake sends what is due by then, all of it here
    assert [h for h, _ in sent] == ["h1", "h2", "h3", "h4"] and len(out) == 0


def test_a_newer_message_replaces_the_one_waiting_and_keeps_its_place():
    out, sent = fanout(hosts=3, spread_s=0.3)
    out.put("h1", {"n": 1})
    out.put("h2", {"n": 1})
    out.put("h1", {"n": 2})
    assert out.waiting("h1") == {"n": 2} and out.replaced == 1
    out.flush(0.0)
    out.flush(0.1)
    assert sent == [("h1", {"n": 2}), ("h2", {"n": 1})]
    assert out.waiting("h1") is None


def test_an_idle_spell_saves_no_credit_for_a_burst():
    out, sent = fanout(hosts=2, spread_s=0.2)
    out.put("h1", {})
    out.flush(0.0)
    out.put("h1", {})
    out.put("h2", {})
    assert out.flush(50.0) == pytest.approx(50.1) and len(sent) == 2  # one now, the next a gap on


def test_messages_due_within_a_wake_of_each_other_leave_together_none_early():
    clock = [0.0]
    sent: list[tuple[str, float]] = []
    out = Fanout(lambda h, m: sent.append((h, clock[0])), 32, 0.25)  # 7.8 ms apart
    for k in range(32):
        out.put(f"h{k}", {})
    wakes = 0
    while (due := out.flush(clock[0])) != math.inf:  # the caller wakes when it is told
        wakes, clock[0] = wakes + 1, due
    assert [h for h, _ in sent] == [f"h{k}" for k in range(32)]
    gap = 0.25 / 32
    assert all(k * gap - 1e-9 <= at < k * gap + WAKE_S for k, (_, at) in enumerate(sent))  # late by under a wake
    assert wakes <= math.ceil(0.25 / WAKE_S) + 1  # not one a message: each wake costs the loop a poll
