"""The series-disk benchmark's arithmetic: moving exported series into a day of their own, joining
them into long series, and splitting the engine's disk into data a sample and index a series."""

import pytest

from clockfabric.bench.monitoring.series_disk import a_day, joined, retimed


def test_series_move_together_keeping_their_gaps_values_and_the_export_itself():
    rows = [{"metric": {"__name__": "a"}, "values": [1.0, 2.0], "timestamps": [1_000, 11_003]},
            {"metric": {"__name__": "b"}, "values": [5.5], "timestamps": [1_500]}]
    moved = list(retimed(rows, 10_000_000))
    assert [m["timestamps"] for m in moved] == [[10_000_000, 10_010_003], [10_000_500]]
    assert [m["values"] for m in moved] == [[1.0, 2.0], [5.5]]
    assert rows[0]["timestamps"] == [1_000, 11_003]


def test_joined_series_are_one_a_name_with_every_sample_once_and_time_always_moving_on():
    rows = [{"metric": {"__name__": "owd", "path": "1"}, "values": [5.0, 6.0], "timestamps": [0, 9_000]},
            {"metric": {"__name__": "owd", "path": "0"}, "values": [1.0, 2.0], "timestamps": [100, 10_100]},
            {"metric": {"__name__": "up"}, "values": [1.0], "timestamps": [0]},
            {"metric": {"__name__": "up", "job": "x"}, "values": [], "timestamps": []}]
    long = joined(rows, 0, 10_000)
    assert [s["metric"]["__name__"] for s in long] == ["owd", "up"]
    assert long[0]["values"] == [1.0, 2.0, 5.0, 6.0]  # path 0's first, in the order of the labels
    assert long[0]["timestamps"] == [0, 10_000, 20_000, 29_000]  # each part's own gaps, a seam between
    assert long[1] == {"metric": {"__name__": "up", "joined": "1"}, "values": [1.0], "timestamps": [0]}


def test_each_name_weighs_by_its_series_and_the_index_is_paid_once_a_day_of_samples():
    # 1,000 series at 1 B a sample and 1,000 at 3 B: 2 B, however many samples the run wrote of each
    split = a_day({"owd": (3.0, 1_000), "up": (1.0, 1_000)}, index_a_series=864.0)
    assert split["data_bytes_a_sample"] == pytest.approx(2.0)
    assert split["index_bytes_a_series"] == pytest.approx(864.0)
    assert split["bytes_a_sample_a_day"] == pytest.approx(2.0 + 864.0 / 8_640)


def test_a_slower_cadence_spreads_the_index_over_fewer_samples():
    fast = a_day({"a": (1.0, 1)}, 8_640.0, cadence_s=1.0)["bytes_a_sample_a_day"]
    slow = a_day({"a": (1.0, 1)}, 8_640.0, cadence_s=10.0)["bytes_a_sample_a_day"]
    assert fast == pytest.approx(1.1) and slow == pytest.approx(2.0)
