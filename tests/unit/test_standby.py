"""Standby subflows: when the kernel's counters say traffic from outside the jobs crowds a spine."""

import pytest

from clockfabric.collective import standby
from clockfabric.collective.standby import Watch, crowded
from clockfabric.collective.transport import TcpCounters

S = 1_000_000  # µs per second


def per_second(busy: float, cwnd: float, losses: int) -> TcpCounters:
    """A second of a subflow's life: busy for `busy` of it, the congestion window holding it for
    `cwnd` of that (the receive window for the rest), `losses` segments resent."""
    return TcpCounters(busy_us=int(busy * S), rwnd_limited_us=int(busy * (1 - cwnd) * S), retrans=losses)


# what the lab showed, per second (collective/standby.py's docstring)
ELEPHANTS = per_second(0.97, 0.99, 2)  # CUBIC elephants fill the FIFO: the window is cwnd's, segments lost
OWN_JOBS = per_second(0.97, 0.10, 0)  # only the jobs' own subflows: the receive window holds them
DEGRADED = per_second(0.97, 1.00, 0)  # a link at a quarter of its rate: cwnd-limited, but nothing lost
QUIET = per_second(0.05, 0.50, 0)


def test_crowded_is_a_congestion_window_held_by_losses():
    assert crowded(ELEPHANTS + ELEPHANTS + ELEPHANTS, 3 * S)
    assert not crowded(OWN_JOBS + OWN_JOBS + OWN_JOBS, 3 * S)
    assert not crowded(DEGRADED + DEGRADED + DEGRADED, 3 * S)
    assert not crowded(QUIET + QUIET + TcpCounters(retrans=10), 3 * S)  # losses on a mostly idle subflow
    assert not crowded(ELEPHANTS, 3 * S)  # two losses in three seconds: not enough


def run(watch: Watch, seconds: list[TcpCounters], start: float = 0.0) -> list[bool]:
    """Feed the watch one read a second, of counters that grow by each second's; its answers."""
    total, out = TcpCounters(), []
    for k, second in enumerate(seconds):
        total = total + second
        out.append(watch.read(start + k + 1, total))
    return out


def test_a_standby_goes_to_work_once_a_whole_look_back_is_crowded():
    w = Watch()
    looks = int(standby.LOOK_S)
    answers = run(w, [TcpCounters()] + [ELEPHANTS] * 6)
    assert answers[:looks] == [False] * looks  # no decision before a whole look back
    assert answers[looks] is True and all(answers[looks:])


def test_own_jobs_and_a_slow_link_never_wake_a_standby():
    for second in (OWN_JOBS, DEGRADED, QUIET):
        assert not any(run(Watch(), [second] * 30)), second


def test_a_working_standby_rides_out_a_lull_and_is_parked_after_quiet_s():
    w = Watch()
    assert run(w, [ELEPHANTS] * 5)[-1]
    quiet = int(standby.QUIET_S)
    answers = run(w, [OWN_JOBS] * (quiet + 5), start=5)
    # the last crowded look back still holds the elephants' seconds for a while; parked QUIET_S after it
    first_parked = answers.index(False)
    assert quiet - 1 <= first_parked <= quiet + int(standby.LOOK_S)
    assert not any(answers[first_parked:])


def test_a_lull_shorter_than_quiet_s_keeps_it_at_work():
    w = Watch()
    run(w, [ELEPHANTS] * 5)
    answers = run(w, [OWN_JOBS] * 4 + [ELEPHANTS] * 5 + [OWN_JOBS] * 4, start=5)
    assert all(answers)


@pytest.mark.parametrize("gap", [0.2, 0.5])
def test_reads_closer_than_a_second_still_look_back_look_s(gap):
    w = Watch()
    total, answers = TcpCounters(), []
    for k in range(int(4 / gap)):
        total = total + TcpCounters(busy_us=int(0.97 * gap * S), retrans=1)
        answers.append(w.read((k + 1) * gap, total))
    first = answers.index(True)
    assert (first + 1) * gap - gap >= standby.LOOK_S - 1e-9  # the first decision had LOOK_S of reads behind it
