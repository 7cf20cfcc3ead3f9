"""Each flow is judged against the median of its siblings (every other flow of its job): taken
from one sort of the job's values, the same as the median of each flow's others, taken apart."""

from __future__ import annotations

import copy
import random

from clockfabric.controller import rootcause
from clockfabric.controller.rootcause import Flow, FlowPoint, FlowStats, Thresholds, judge, median, medians_without


def _apart(values: list[float | None]) -> list[float | None]:
    """Each value's others listed and their median taken: n squared."""
    return [median(v for j, v in enumerate(values) if j != i) for i in range(len(values))]


def test_each_values_median_without_it_is_the_median_of_the_others():
    rng = random.Random(7)
    for _ in range(3000):
        n = rng.randrange(0, 10)
        # ties, Nones and repeats of one value, as a job's idle or equal flows give
        values = [rng.choice([None, rng.choice([1.0, 2.0, 2.0]), rng.uniform(0, 100)]) for _ in range(n)]
        assert medians_without(values) == _apart(values), values


def _verdicts(stats: list[FlowStats]) -> list[tuple]:
    return [(s.why, s.network_slow, s.starved, s.held, s.queued_since_ns) for s in stats]


def test_a_jobs_flows_are_judged_as_against_each_ones_siblings_taken_apart(monkeypatch):
    rng = random.Random(11)
    limits = Thresholds()
    judged = []
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
        apart = copy.deepcopy(stats)
        with monkeypatch.context() as m:
            m.setattr(rootcause, "medians_without", _apart)
            judge(apart, limits)
        judge(stats, limits)
        assert _verdicts(stats) == _verdicts(apart)
        judged += [bool(s.why) for s in stats]
    assert 0.1 < sum(judged) / len(judged) < 0.9  # the cases hold flows judged slow and flows not
