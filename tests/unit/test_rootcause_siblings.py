"""Each flow is judged against the median of its siblings (every other flow of its job): taken
from one sort of the job's values, the same as the median of each flow's others, taken apart."""

from __future__ import annotations

import copy
import random

from clockfabric.controller.rootcause import (
    Flow,
    FlowPoint,
    FlowStats,
    Thresholds,
    delay_of,
    far_above,
    judge,
    median,
    medians_without,
    run_since,
    send_wait_us,
)


def test_each_values_median_without_it_is_the_median_of_the_others():
    rng = random.Random(7)
    for _ in range(3000):
        n = rng.randrange(0, 10)
        # ties, Nones and repeats of one value, as a job's idle or equal flows give
        values = [rng.choice([None, rng.choice([1.0, 2.0, 2.0]), rng.uniform(0, 100)]) for _ in range(n)]
        expected = [median(v for j, v in enumerate(values) if j != i) for i in range(n)]
        assert medians_without(values) == expected, values


def _reference(stats: list[FlowStats], limits: Thresholds) -> None:
    """The judgement as it was written flow by flow: each one's siblings listed and their medians
    taken apart (n squared)."""
    for s in stats:
        siblings = [o for o in stats if o is not s]
        margin = limits.margin_us(s.delay_source, s.flow.hops, None)
        sib_delay = median(o.delay_us for o in siblings)
        sib_rate = median(o.rate_bps for o in siblings if (o.rate_bps or 0) >= limits.active_bps)
        if s.delay_us is not None and sib_delay is not None and far_above(s.delay_us, sib_delay, margin, limits):
            s.why.append(f"delay {s.delay_us:.0f} us ({s.delay_source}) vs its siblings' {sib_delay:.0f} us")
        if s.delay_us is not None and s.floor_us is not None and far_above(s.delay_us, s.floor_us, margin, limits):
            s.why.append(f"delay {s.delay_us:.0f} us ({s.delay_source}) vs its path's probe floor {s.floor_us:.0f} us")
        s.network_slow = bool(s.why)
        if s.network_slow:
            delay = s.delay_us or 0.0
            bases = [b for b in (sib_delay, s.floor_us) if b is not None and far_above(delay, b, margin, limits)]
            s.queued_since_ns = run_since([(p.t_ns, delay_of(s, p)) for p in s.flow.points], min(bases), margin,
                                          limits)
        if sib_rate is not None and s.rate_bps is not None and s.rate_bps < sib_rate * limits.rate_ratio:
            s.why.append(f"rate {s.rate_bps / 1e6:.1f} Mbit/s vs its siblings' {sib_rate / 1e6:.1f} Mbit/s")
            wait = send_wait_us(s, sib_rate)
            sib_wait = median(send_wait_us(o, sib_rate) for o in siblings) or 0.0
            if not s.network_slow and wait is not None and far_above(wait, sib_wait, limits.rtt_margin_us, limits):
                s.why.append(f"{(s.send_queue_bytes or 0) / 1024:.0f} KiB wait to be sent: {wait / 1000:.0f} ms "
                             f"at its siblings' rate, vs their {sib_wait / 1000:.1f} ms")
                s.network_slow = s.held = True
                waits = [(p.t_ns, None if p.send_queue_bytes is None else p.send_queue_bytes * 8 / sib_rate * 1e6)
                         for p in s.flow.points]
                s.queued_since_ns = run_since(waits, sib_wait, limits.rtt_margin_us, limits)
            s.starved = not s.network_slow


def _verdicts(stats: list[FlowStats]) -> list[tuple]:
    return [(s.why, s.network_slow, s.starved, s.held, s.queued_since_ns) for s in stats]


def test_a_jobs_flows_are_judged_as_against_each_ones_siblings_taken_apart():
    rng = random.Random(11)
    limits = Thresholds()
    for _ in range(300):
        stats = []
        for i in range(rng.randrange(1, 30)):
            delay = rng.choice([None, rng.uniform(20, 80), rng.uniform(200, 5000)])
            points = (FlowPoint(t_ns=10**9, tx_bps=1e7, owd_us=delay),)
            stats.append(FlowStats(Flow(f"h{i}", f"f{i}", "1", points=points),
                                   rate_bps=rng.choice([None, 5e5, rng.uniform(1e6, 1e8), 5e7]),
                                   delay_us=delay, delay_source=rng.choice(["inband", "rtt/2"]),
                                   floor_us=rng.choice([None, 20.0, 40.0]),
                                   send_queue_bytes=rng.choice([None, 0.0, rng.uniform(0, 1e6)])))
        want = copy.deepcopy(stats)
        _reference(want, limits)
        judge(stats, limits)
        assert _verdicts(stats) == _verdicts(want)
