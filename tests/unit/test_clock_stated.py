"""One-way delays go to the series engine as a measurement is stated (clock.delays.stated): to the
place of their clocks' bound's second significant digit, so the engine does not store noise."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest

from clockfabric.agent.config import AgentConfig
from clockfabric.agent.services.clock import ClockSync
from clockfabric.clock.delays import stated
from clockfabric.topology import leafspine


@pytest.mark.parametrize(("value", "bound", "written"), [
    (52_347, 1_100, 52_300),  # known to about a microsecond: to 100 ns
    (52_347, 900, 52_350),  # to 10 ns
    (52_347, 99, 52_347),  # a bound of tens of ns keeps every nanosecond
    (1_234_567, 12_000, 1_235_000),  # a loaded clock's bound: to a microsecond
])
def test_a_delay_is_written_to_the_place_its_bound_allows(value, bound, written):
    assert stated(value, bound) == written


@pytest.mark.parametrize("bound", [0, 5, math.nan, math.inf])
def test_no_bound_to_go_by_leaves_the_delay_as_it_is(bound):
    assert stated(52_347.25, bound) == 52_347.25


def test_rounding_moves_a_delay_by_a_twentieth_of_its_bound_at_most():
    rng = random.Random(7)
    for _ in range(10_000):
        value, bound = rng.uniform(0, 1e7), 10 ** rng.uniform(1, 6)
        assert abs(stated(value, bound) - value) <= bound / 20


def test_the_pushed_delays_are_stated_to_their_bound():
    cfg = AgentConfig("h1", leafspine(4, 2, 2), "/nonexistent", peers=3)
    ctx = SimpleNamespace(cfg=cfg, engine=SimpleNamespace(interval_s=1.0, exchanges=[], names={}),
                          time_source=None, send=lambda host, msg: None, clock=SimpleNamespace(set_ns=lambda: 0))
    svc = ClockSync(ctx)
    row = {"src": "h1", "dst": "h2", "path": "s1", "bound_ns": 1_500, "trusted": True,
           "min_ns": 50_123, "p50_ns": 52_347, "p99_ns": 61_999, "floor_ns": 50_049}
    ctx.latest = {"owd": [row], "class_owd": [{"src": "h1", "dst": "h2", "path": "s1", "dscp": 26,
                                              "bound_ns": 15_000, "p50_ns": 77_777}]}
    written = {s["name"]: s["value"] for s in svc.snapshot().samples}
    assert written == {"owd_min_ns": 50_100, "owd_p50_ns": 52_300, "owd_p99_ns": 62_000, "owd_floor_ns": 50_000,
                       "class_owd_p50_ns": 78_000, "owd_span_ns": svc.sync.spans()["owd"],
                       "class_owd_span_ns": svc.sync.spans()["class_owd"]}
