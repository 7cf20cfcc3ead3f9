"""Virtual clocks: exact integer arithmetic, reproducible wander, steps, files."""

import time

import pytest

from clockfabric.clock.vclock import CLOCK_ENV, SystemClock, VirtualClock, host_clock, random_clocks

EPOCH = 1_790_000_000_000_000_000  # an epoch in ns: float64 could not hold it to the ns


def test_offset_and_drift_are_exact_to_the_nanosecond():
    c = VirtualClock("h0", EPOCH, offset_ns=-1_234_567, drift_ppm=12.5)
    assert c.local_ns(EPOCH) == EPOCH - 1_234_567
    # after 1000 s a 12.5 ppm clock has gained 12.5 ms
    assert c.local_ns(EPOCH + 1000 * 10**9) == EPOCH + 1000 * 10**9 - 1_234_567 + 12_500_000
    assert c.local_ns(EPOCH + 7) - c.local_ns(EPOCH) == 7  # a 7 ns step is not lost in rounding


def test_wander_is_reproducible_continuous_and_of_the_right_size():
    a = VirtualClock("h0", EPOCH, 0, 0.0, wander_ns=100.0, seed=7)
    b = VirtualClock("h0", EPOCH, 0, 0.0, wander_ns=100.0, seed=7)
    other = VirtualClock("h1", EPOCH, 0, 0.0, wander_ns=100.0, seed=7)
    times = [EPOCH + k * 250_000_000 for k in range(0, 4000)]  # 1000 s, across block edges
    wa = [a.local_ns(t) - t for t in times]
    assert wa == [b.local_ns(t) - t for t in times]  # an agent and an evaluator agree
    assert wa != [other.local_ns(t) - t for t in times]  # hosts wander independently
    jumps = [abs(x - y) for x, y in zip(wa, wa[1:])]
    assert max(jumps) < 100 * 5  # continuous: a quarter second never jumps by 5 sigma
    # the spread of one-second changes matches the configured wander
    per_second = [wa[i + 4] - wa[i] for i in range(0, len(wa) - 4, 4)]
    rms = (sum(d * d for d in per_second) / len(per_second)) ** 0.5
    assert 70 < rms < 130


def test_steps_apply_from_their_instant():
    c = VirtualClock("h0", EPOCH, 0, 0.0).with_step(EPOCH + 10**9, 2_000_000)
    assert c.local_ns(EPOCH + 10**9 - 1) == EPOCH + 10**9 - 1
    assert c.local_ns(EPOCH + 10**9) == EPOCH + 10**9 + 2_000_000


def test_json_round_trip_keeps_the_model():
    c = VirtualClock("h3", EPOCH, 42, -99.125, 5.0, 3, ((EPOCH + 5, -7),))
    back = VirtualClock.from_json(c.to_json())
    assert back == c
    t = EPOCH + 123_456_789_012
    assert back.local_ns(t) == c.local_ns(t)


def test_random_clocks_stay_in_bounds_and_repeat_with_the_seed():
    hosts = [f"h{i}" for i in range(50)]
    one = random_clocks(hosts, max_offset_ns=50_000_000, max_drift_ppm=100, wander_ns=0, seed=4, epoch_ns=EPOCH)
    two = random_clocks(hosts, max_offset_ns=50_000_000, max_drift_ppm=100, wander_ns=0, seed=4, epoch_ns=EPOCH)
    assert one == two
    assert all(abs(c.offset_ns) <= 50_000_000 and abs(c.drift_ppm) <= 100 for c in one.values())
    assert len({c.offset_ns for c in one.values()}) == 50


def test_host_clock_reads_the_file_named_in_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "h0.json"
    path.write_text(VirtualClock("h0", time.time_ns(), 5_000_000, 0.0).to_json())
    monkeypatch.setenv(CLOCK_ENV, str(path))
    clock = host_clock()
    assert clock.now_ns() - time.time_ns() == pytest.approx(5_000_000, abs=2_000_000)
    monkeypatch.delenv(CLOCK_ENV)
    assert isinstance(host_clock(), SystemClock)


def test_a_rate_change_bends_the_clock_without_a_step_and_survives_json():
    at = EPOCH + 10 * 10**9
    c = VirtualClock("h0", EPOCH, 0, 100.0).with_rate(at, 500.0)
    assert c.local_ns(at) - at == 1_000_000  # 100 ppm for 10 s, and no jump where the rate changes
    assert c.local_ns(at + 1) - c.local_ns(at - 1) == 2
    assert c.local_ns(at + 10**9) - c.local_ns(at) == 10**9 + 500_000  # 500 ppm from then on
    assert c.drift_now_ppm == 500.0 and VirtualClock.from_json(c.to_json()) == c
    with pytest.raises(ValueError):
        c.with_rate(at - 1, 0.0)
