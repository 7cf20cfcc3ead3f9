"""QueueSampler: the NICs' queues read at random instants and summed up as medians, so that a
paced sender's own bursts, read on a beat in step with them, never pass for a standing queue."""

from __future__ import annotations

import random

from clockfabric.qos.backlog import QueueSampler


class Burst:
    """A NIC whose queue holds a sender's burst for `busy_s` of every `period_s` (a paced
    sender's chunk waiting to leave), and a standing `standing_s` behind it, read at the clock's time."""

    def __init__(self, period_s: float, busy_s: float, burst_wait_s: float, standing_s: float = 0.0):
        self.period_s, self.busy_s, self.burst_wait_s, self.standing_s = period_s, busy_s, burst_wait_s, standing_s
        self.now_s = 0.0
        self.reads = 0

    def read(self):
        self.reads += 1
        busy = (self.now_s % self.period_s) < self.busy_s
        wait = self.standing_s + (self.burst_wait_s if busy else 0.0)
        return {"eth0": wait}, {"eth0": {0: wait, 26: self.standing_s}}


def updates(nic: Burst, sampler: QueueSampler, n: int, update_s: float = 1.0, start_s: float = 0.0005,
            idle: bool = False):
    """`n` updates of an agent's loop that wakes for each poll the sampler asks for, and polls
    again after each update (as the agent's loop does, at least every 0.2 s)."""
    out, t, next_poll = [], start_s, 0.0
    for k in range(1, n + 1):
        tick = start_s + k * update_s
        while next_poll <= tick:
            t = max(t, next_poll)
            nic.now_s = t
            next_poll = sampler.poll(t)
        nic.now_s = tick
        out.append(sampler.take(idle))
        next_poll = sampler.poll(tick)
    return out


def test_a_beat_in_step_with_a_paced_sender_sees_its_burst_every_time_the_sampler_does_not():
    nic = Burst(period_s=0.01, busy_s=0.0003, burst_wait_s=300e-6)  # 3% of the time
    on_beat = []
    for k in range(1, 21):  # a reading each second: every one lands in the burst (1 s is 100 periods)
        nic.now_s = 0.0001 + k * 1.0
        on_beat.append(nic.read()[0]["eth0"])
    assert all(w == 300e-6 for w in on_beat)
    sampled = updates(nic, QueueSampler(nic, rng=random.Random(7)), 20, start_s=0.0001)
    assert all(whole["eth0"] == 0.0 and by["eth0"][0] == 0.0 for whole, by in sampled)


def test_a_standing_queue_is_read_whole_and_each_class_apart():
    nic = Burst(period_s=0.01, busy_s=0.009, burst_wait_s=2e-3, standing_s=1e-3)  # busy 90% of the time
    sampled = updates(nic, QueueSampler(nic, rng=random.Random(3)), 10)
    assert all(whole["eth0"] == 3e-3 and by["eth0"] == {0: 3e-3, 26: 1e-3} for whole, by in sampled)


def test_readings_come_at_the_asked_rate_on_average_and_an_update_with_none_reads_once():
    nic = Burst(period_s=1.0, busy_s=0.0, burst_wait_s=0.0)
    sampler = QueueSampler(nic, reads_per_s=5.0, rng=random.Random(11))
    updates(nic, sampler, 200)
    assert 900 <= nic.reads <= 1100  # Poisson: 1,000 expected, sd about 32
    before = nic.reads
    assert sampler.take() == ({"eth0": 0.0}, {"eth0": {0: 0.0, 26: 0.0}})
    assert nic.reads == before + 1


def test_idle_nics_with_empty_queues_are_read_at_the_idle_rate_and_a_queue_brings_the_full_rate_back():
    nic = Burst(period_s=1.0, busy_s=0.0, burst_wait_s=0.0)
    sampler = QueueSampler(nic, reads_per_s=5.0, idle_reads_per_s=1.0, rng=random.Random(5))
    updates(nic, sampler, 200, idle=True)
    # Poisson at 1/s, and a read by `take` in the third of the updates that had none: about 274
    assert 220 <= nic.reads <= 330
    busy = Burst(period_s=1.0, busy_s=0.0, burst_wait_s=0.0)
    updates(busy, QueueSampler(busy, reads_per_s=5.0, idle_reads_per_s=1.0, rng=random.Random(5)), 200)
    assert 900 <= busy.reads <= 1100  # traffic on the NICs: the full rate

    # idle NICs whose queue holds a backlog (a link shaped below one busy flow): the full rate
    standing = Burst(period_s=1.0, busy_s=0.0, burst_wait_s=0.0, standing_s=1e-3)
    sampler = QueueSampler(standing, reads_per_s=5.0, idle_reads_per_s=1.0, rng=random.Random(5))
    updates(standing, sampler, 200, idle=True)
    assert 900 <= standing.reads <= 1100

    # from idle to busy: the very next update is read at the full rate again
    nic = Burst(period_s=1.0, busy_s=0.0, burst_wait_s=0.0)
    sampler = QueueSampler(nic, reads_per_s=5.0, idle_reads_per_s=1.0, rng=random.Random(9))
    updates(nic, sampler, 5, idle=True)
    assert sampler.rate == 1.0
    sampler.take(idle=False)
    assert sampler.rate == 5.0
    before = nic.reads
    updates(nic, sampler, 100, start_s=5.0005)
    assert 450 <= nic.reads - before <= 560
