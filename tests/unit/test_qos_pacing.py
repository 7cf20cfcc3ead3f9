"""The lower classes' rate law (qos/pacing.py) in a closed loop with a fluid FIFO: the higher
class's queue is back under target within a second of a greedy scavenger's onset, the limit
goes when the higher class idles (work-conserving), the scavenger keeps most of what the higher
class leaves, a reading a period late still converges, and unstable gains are refused."""

from __future__ import annotations

import pytest

from clockfabric.qos.pacing import Gains, LinkPacer, shares

C = 100e6  # bits/s
DEFAULT = Gains()


def run(high, periods, *, late=False, gains=DEFAULT):
    """A greedy lower class and a higher one at high(k) bits/s through one FIFO of capacity C.
    Returns per period: (queue seconds, lower class delivered bits/s, the limit)."""
    pacer, queue_bits, seen, out = LinkPacer(C, gains), 0.0, None, []
    for k in range(periods):
        a = high(k)
        q = queue_bits / C
        reading = seen if late else q  # the queue as the controller sees it
        seen = q
        limit = pacer.step(a, reading if a > 0 else None)
        low = C if limit is None else limit
        queue_bits = max(0.0, queue_bits + (a + low - C) * gains.period_s)
        served_low = low if queue_bits > 0 else min(low, C - a)  # a FIFO at its fill serves what arrives
        out.append((queue_bits / C, served_low, limit))
    return out


def onset_to_target_s(trace, start, gains=DEFAULT):
    for k in range(start, len(trace)):
        if all(q <= gains.target_s * 1.05 for q, _, _ in trace[k:]):
            return (k - start) * gains.period_s
    return float("inf")


def test_the_higher_class_queue_is_under_target_within_a_second_of_the_onset():
    high = lambda k: 0.6 * C if k >= 5 else 0.0  # noqa: E731 - the scavenger runs alone first
    trace = run(high, 60, late=True)  # the queue as read a period late; the rate of the higher class at once
    assert all(limit is None for _, _, limit in trace[:5])  # alone: not limited at all
    assert max(q for q, _, _ in trace) > 0  # the onset queued
    assert onset_to_target_s(trace, 5) <= 1.0, [round(q * 1e6) for q, _, _ in trace[:20]]


def test_a_reading_one_period_late_still_converges():
    trace = run(lambda k: 0.6 * C, 80, late=True)
    assert onset_to_target_s(trace, 0) <= 1.5
    assert max(q for q, _, _ in trace[40:]) <= Gains().target_s * 1.05


def test_no_starvation_and_work_conservation():
    # the higher class computes (idle) half the time, like a training job between all-reduces
    high = lambda k: 0.5 * C if (k // 20) % 2 == 0 else 0.0  # noqa: E731
    trace = run(high, 200)
    leftover = sum(C - high(k) for k in range(200))
    assert sum(low for _, low, _ in trace) >= 0.8 * leftover
    idle = [trace[k][2] for k in range(200) if (k // 20) % 2 == 1 and k % 20 >= Gains().release_periods]
    assert idle and all(limit is None for limit in idle)  # the whole link, while the higher class idles


def test_the_floor_keeps_a_lower_class_alive():
    trace = run(lambda k: 1.5 * C, 30)  # the higher class alone overloads the link
    assert all(limit is None or limit >= Gains().floor * C for _, _, limit in trace)
    assert trace[-1][2] == pytest.approx(Gains().floor * C)


@pytest.mark.parametrize("kappa", [0.0, 1.0, 1.5])
def test_gains_outside_the_stable_range_are_refused(kappa):
    with pytest.raises(ValueError, match="where the loop is stable"):
        Gains(kappa=kappa)


def test_shares_split_by_weight():
    assert shares(30e6, {"a": 1, "b": 2}) == {"a": 10e6, "b": 20e6}
    assert shares(None, {"a": 1}) == {"a": None}
