"""A lab host's clock step reaches its agent's timestamps at once, not at the agent's next tick."""

from __future__ import annotations

import os
import time

from clockfabric.agent import agent
from clockfabric.agent.agent import ReloadingClock
from clockfabric.clock.vclock import SystemClock, VirtualClock

STEP_NS = 1_000_000


def _write(path, clock: VirtualClock, mtime: float) -> None:
    path.write_text(clock.to_json())
    os.utime(path, (mtime, mtime))  # a rewrite within one mtime tick would look unchanged


def _lab_clock(tmp_path, monkeypatch) -> tuple:
    """A lab host's clock file, its model, the monotonic clock (moved by hand), and the agent's reader."""
    path = tmp_path / "h1.json"
    before = VirtualClock("h1", epoch_ns=0, offset_ns=5_000, drift_ppm=10.0)
    _write(path, before, 1_000.0)
    now = [100.0]
    monkeypatch.setattr(agent.time, "monotonic", lambda: now[0])
    return path, before, now, ReloadingClock(str(path))


def test_a_step_shows_in_the_next_reading_after_the_recheck(tmp_path, monkeypatch):
    path, before, now, clock = _lab_clock(tmp_path, monkeypatch)
    real = time.time_ns()
    assert clock.local_ns(real) == before.local_ns(real)

    _write(path, before.with_step(real - 1, STEP_NS), 2_000.0)  # `lab clock step`, as it saves it
    assert clock.local_ns(real) == before.local_ns(real)  # within RECHECK_S: not looked at yet
    now[0] += agent.RECHECK_S
    assert clock.local_ns(real) - before.local_ns(real) == STEP_NS  # no tick, no refresh() called
    assert clock.now_ns() - before.now_ns() in range(STEP_NS - 1_000_000, STEP_NS + 1_000_000)


def test_a_file_caught_mid_rewrite_keeps_the_last_good_model(tmp_path, monkeypatch):
    path = tmp_path / "h1.json"
    good = VirtualClock("h1", epoch_ns=0, offset_ns=7_000, drift_ppm=0.0)
    _write(path, good, 1_000.0)
    now = [100.0]
    monkeypatch.setattr(agent.time, "monotonic", lambda: now[0])
    clock = ReloadingClock(str(path))
    path.write_text("{")
    os.utime(path, (3_000.0, 3_000.0))
    now[0] += agent.RECHECK_S
    assert clock.local_ns(10**18) == good.local_ns(10**18)


def test_the_clock_says_how_far_it_was_set_a_step_counting_and_a_rate_change_not(tmp_path, monkeypatch):
    path, before, now, clock = _lab_clock(tmp_path, monkeypatch)
    assert clock.set_ns() == 0
    real = time.time_ns()
    _write(path, before.with_rate(real - 2, 500.0).with_step(real - 1, -STEP_NS), 2_000.0)
    now[0] += agent.RECHECK_S
    assert clock.set_ns() == -STEP_NS
    ahead = clock.clock.with_step(real + 3_600 * 10**9, STEP_NS)  # set for an hour from now: not yet
    assert ahead.set_ns() == -STEP_NS


def test_the_system_clock_reads_as_set_alike_while_nothing_sets_it():
    clock = SystemClock()
    reads = [clock.set_ns() for _ in range(200)]
    assert max(reads) - min(reads) < 5_000  # well under a step the agent takes for one
    set_now = time.clock_gettime_ns(time.CLOCK_REALTIME) - time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    assert abs(reads[0] - set_now) < 1e6
