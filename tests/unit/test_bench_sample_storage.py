"""bench sample-storage on a small load: what it measures is there and adds up."""

from __future__ import annotations

import struct

from clockfabric.bench.controller import sample_storage as bench
from clockfabric.controller.storage.retention import HOUR_NS, MINUTE_NS


def test_packed_rows_keep_every_sample_of_each_series_minute():
    batches = bench.load(hosts=2, minutes=2)
    series, rows = bench.packed_rows(batches)
    assert len(series) == len({(s.name, s.host, str(s.labels)) for s in batches[0]})
    assert len(rows) == 2 * len(series)  # two minutes of each series
    assert sum(len(vals) // 8 for *_, vals in rows) == sum(map(len, batches))
    clock = next(i for i, name, host, _ in series if name == "clock_offset_ns")  # one sample a push
    first = next(r for r in rows if r[:2] == (clock, bench.START_NS))
    offsets = struct.unpack(f"<{len(first[2]) // 2}H", first[2])
    assert offsets[:3] == (0, 1000, 2000) and len(offsets) == 60  # ms into the minute, one a second


def test_sqlite_case_rolls_everything_up_and_measures_each_form(tmp_path):
    batches = bench.load(hosts=1, minutes=2)
    case = bench.sqlite_case(batches, tmp_path)
    n = case["series"]
    assert case["raw_rows"] == 120 * len(batches[0])
    assert case["rollup_rows"] == {MINUTE_NS: 2 * n, HOUR_NS: n}
    assert 50 < case["raw_bytes_a_sample"] < 400
    assert case["packed_bytes_a_sample"] < case["raw_bytes_a_sample"] / 3
    assert case["interned_rollup_bytes_a_row"] < case["rollup_bytes_a_row"]
    day = bench.host_day(case, len(batches[0]), n)
    assert day["raw"] == round(case["raw_bytes_a_sample"] * len(batches[0]) * 86_400)
    assert day["minutes"] == round(case["rollup_bytes_a_row"] * n * 1440)
    assert bench.year(day, 7) == day["raw"] * 7 + day["minutes"] * 90 + day["hours"] * 365
    compact = day["packed"] * 2 + day["minutes_interned"] * 90 + day["hours_interned"] * 365
    assert bench.year(day, 2, "compact") == compact


def test_interned_rollups_keep_every_figure_under_the_series_number():
    series = [(1, "a", "h0", "{}"), (2, "b", "h0", '{"x":"1"}')]
    rows = [("b", "h0", '{"x":"1"}', MINUTE_NS, 0, 3, 6.0, 1.0, 3.0), ("a", "h0", "{}", HOUR_NS, 0, 1, 2.0, 2.0, 2.0)]
    assert bench.interned(series, rows) == [(2, MINUTE_NS, 0, 3, 6.0, 1.0, 3.0), (1, HOUR_NS, 0, 1, 2.0, 2.0, 2.0)]
