"""The lower classes' rate law (qos/pacing.py) in a closed loop with a fluid FIFO: the higher
class's queue is back under target within a second of a greedy scavenger's onset, the limit
goes when the higher class idles (work-conserving), the scavenger keeps most of what the higher
class leaves, a reading a period late still converges, a standing queue cuts the lower classes
below what an elastic higher class seems to leave (and a queue just over target does not), and
unstable gains are refused."""

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


def test_a_standing_queue_cuts_the_lower_classes_below_what_the_higher_class_seems_to_leave():
    # an elastic higher class sends what contention leaves it: its rate says 30% of the link while
    # its queue stands at 20 ms, so C - a hands the lower classes 70% again; the standing queue
    # cuts them by half a period instead, until it falls
    pacer = LinkPacer(C, Gains(period_s=2.0))  # a last hop, read once a 2 s window
    limits = [pacer.step(0.3 * C, 0.020) for _ in range(6)]
    assert limits[0] == pytest.approx(0.7 * C - 0.5 * C * (0.020 - 200e-6) / 2.0)  # the law, first
    assert all(b == pytest.approx(max(a / 2, Gains().floor * C)) for a, b in zip(limits[1:-1], limits[2:], strict=True))
    assert limits[-1] < 0.05 * C
    # a falling queue is left to the law; under target the lower classes climb back, not leap
    falling = pacer.step(0.6 * C, 0.010)
    assert falling == pytest.approx(min(limits[-1] + Gains().rise * C, 0.4 * C - 0.5 * C * 0.0098 / 2.0))
    assert falling < 0.3 * C
    # and the law stays the ceiling: it ends where the law's own equilibrium is
    assert pacer.step(0.6 * C, 0.0) == pytest.approx(min(falling + Gains().rise * C, 0.4 * C + 0.5 * C * 200e-6 / 2.0))


def test_a_queue_just_over_target_is_the_laws_alone():
    pacer = LinkPacer(C, DEFAULT)
    for _ in range(5):  # over target, under twice it: no cut beyond the law, however long
        limit = pacer.step(0.5 * C, 300e-6)
    assert limit == pytest.approx(0.5 * C - 0.5 * C * 100e-6 / 0.1)


@pytest.mark.parametrize("gains", [{"backoff": 0.0}, {"backoff": 1.0}, {"rise": 0.0}, {"rise": 1.5}])
def test_a_cut_or_a_climb_out_of_range_is_refused(gains):
    with pytest.raises(ValueError, match="backoff .* must be in"):
        Gains(**gains)


def test_a_window_that_caught_the_higher_class_between_bursts_does_not_open_the_link():
    # the workload's window reads the higher class's demand once a second (ten periods): it
    # waited on the link all of one window, then 84% of the next (a step's compute in it); a
    # paced lower class would take 16% of the link through every burst of the next second
    pacer, window = LinkPacer(C, DEFAULT), 10
    readings = [1.0 * C] * window + [0.84 * C] * window
    limits = [pacer.step(a, 0.0) for a in readings]
    assert all(limit == pytest.approx(DEFAULT.floor * C) for limit in limits[window:])
    # two windows on, the dip is the higher class's demand
    limits = [pacer.step(0.84 * C, 0.0) for _ in range(2 * window)]
    assert limits[-1] == pytest.approx(0.16 * C + 0.5 * C * 200e-6 / 0.1)


def test_an_idle_higher_class_starts_its_hold_afresh():
    pacer = LinkPacer(C, DEFAULT)
    for _ in range(5):
        pacer.step(1.0 * C, 0.0)
    idle = [pacer.step(0.0, None) for _ in range(DEFAULT.release_periods)]
    assert idle[0] is not None and idle[-1] is None  # held, then released
    # back at 30% of the link: the law, not the busy second before the idle one
    assert pacer.step(0.3 * C, 0.0) == pytest.approx(0.7 * C + 0.5 * C * 200e-6 / 0.1)
