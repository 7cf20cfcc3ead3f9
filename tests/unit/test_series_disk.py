"""The series-disk benchmark's arithmetic: moving exported series onto the fleet cadence, joining
them into long series, and splitting the engine's disk into data a sample and index a series."""

import pytest

from clockfabric.bench.monitoring.series_disk import a_day, joined, on_cadence, retimed


def test_a_series_moves_to_the_start_with_its_median_gap_made_the_cadence_and_its_jitter_scaled():
    assert on_cadence([1_000, 6_000, 11_500, 16_500], 100_000, 10_000) == [100_000, 110_000, 121_000, 131_000]
    assert on_cadence([7_000], 100_000, 10_000) == [100_000]
    assert on_cadence([], 100_000, 10_000) == []


def test_retimed_series_keep_their_values_and_leave_the_export_alone():
    rows = [{"metric": {"__name__": "a"}, "values": [1.0, 2.0, 3.0], "timestamps": [0, 2_000, 4_000]}]
    moved = list(retimed(rows, 50_000, 10_000))
    assert moved[0]["timestamps"] == [50_000, 60_000, 70_000] and moved[0]["values"] == [1.0, 2.0, 3.0]
    assert rows[0]["timestamps"] == [0, 2_000, 4_000]


def test_joined_series_are_one_a_name_with_every_value_once_and_time_always_moving_on():
    rows = [{"metric": {"__name__": "owd", "path": "1"}, "values": [5.0, 6.0], "timestamps": [0, 5_000]},
            {"metric": {"__name__": "owd", "path": "0"}, "values": [1.0, 2.0], "timestamps": [100, 5_100]},
            {"metric": {"__name__": "up"}, "values": [1.0], "timestamps": [0]}]
    long = joined(rows, 0, 10_000)
    assert [s["metric"]["__name__"] for s in long] == ["owd", "up"]
    assert long[0]["values"] == [1.0, 2.0, 5.0, 6.0]  # path 0's first, in the order of the labels
    assert long[0]["timestamps"] == [0, 10_000, 20_000, 30_000]
    assert long[1] == {"metric": {"__name__": "up", "joined": "1"}, "values": [1.0], "timestamps": [0]}


def test_the_index_is_paid_once_a_day_of_samples_and_the_data_by_each():
    split = a_day(data_bytes=1_000_000, samples=1_000_000, index_bytes=864_000, series=1_000)
    assert split["data_bytes_a_sample"] == pytest.approx(1.0)
    assert split["index_bytes_a_series"] == pytest.approx(864.0)
    assert split["bytes_a_sample_a_day"] == pytest.approx(1.0 + 864.0 / 8_640)


def test_a_slower_cadence_spreads_the_index_over_fewer_samples():
    fast = a_day(100, 100, 8_640, 1, cadence_s=1.0)["bytes_a_sample_a_day"]
    slow = a_day(100, 100, 8_640, 1, cadence_s=10.0)["bytes_a_sample_a_day"]
    assert fast == pytest.approx(1.1) and slow == pytest.approx(2.0)
