"""The series-disk benchmark's arithmetic: moving exported series into a day of their own, joining
them into long series, and splitting the engine's disk into data a sample and index a series."""

import pytest

from clockfabric.bench.monitoring.series_disk import Name, a_day, fleet_series, joined, retimed, rule_outputs


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


def test_each_name_weighs_by_its_samples_a_day_and_the_index_by_the_days_series():
    # 1,000 series at 1 B a sample and 1,000 at 3 B, both every 10 s: 2 B, however many samples the run wrote
    split = a_day({"owd": Name(3.0, 1_000, 10.0), "up": Name(1.0, 1_000, 10.0)}, index_a_series=864.0)
    assert split["data_bytes_a_sample"] == pytest.approx(2.0)
    assert split["index_bytes_a_series"] == pytest.approx(864.0)
    assert split["bytes_a_sample_a_day"] == pytest.approx(2.0 + 864.0 / 8_640)
    assert split["samples_a_day_a_host"] == pytest.approx(2_000 * 8_640)


def test_a_rules_output_written_every_30_s_weighs_a_third_of_an_agents_series():
    split = a_day({"owd": Name(3.0, 100, 10.0), "owd_seconds": Name(1.0, 100, 30.0)}, index_a_series=0.0)
    assert split["data_bytes_a_sample"] == pytest.approx((3.0 * 3 + 1.0) / 4)
    assert split["samples_a_day_a_host"] == pytest.approx(100 * 8_640 + 100 * 2_880)


def test_a_slower_cadence_spreads_the_index_over_fewer_samples():
    fast = a_day({"a": Name(1.0, 1, 1.0)}, 8_640.0)["bytes_a_sample_a_day"]
    slow = a_day({"a": Name(1.0, 1, 10.0)}, 8_640.0)["bytes_a_sample_a_day"]
    assert fast == pytest.approx(1.1) and slow == pytest.approx(2.0)


def test_a_peers_series_counts_as_one_of_the_fleets_peers_and_a_hosts_own_once():
    rows = [{"metric": {"__name__": "owd", "dst": f"h{i}", "host": "h0"}} for i in range(1, 8)]
    rows += [{"metric": {"__name__": "q", "peer": "h1", "host": "h0"}}, {"metric": {"__name__": "up", "host": "h0"}}]
    host = fleet_series(rows, hosts=1, peers=7, fleet_peers=10)
    assert host == pytest.approx({"owd": 10.0, "q": 10 / 7, "up": 1.0})
    assert fleet_series(rows, hosts=2, peers=7, fleet_peers=7) == pytest.approx({"owd": 3.5, "q": 0.5, "up": 0.5})


def test_the_rules_outputs_are_the_names_the_shipped_rules_record(tmp_path):
    f = tmp_path / "r.yml"
    f.write_text("groups:\n  - name: g\n    rules:\n      - record: job:up:ratio\n        expr: avg(up)\n"
                 "      - alert: Down\n        expr: up == 0\n      - expr: vector(1)\n        record: up\n")
    assert rule_outputs([f]) == {"job:up:ratio", "up", "ALERTS", "ALERTS_FOR_STATE"}
    shipped = rule_outputs()
    assert {"up", "host_peer:clockfabric_owd_p99_seconds:max"} <= shipped
    assert "clockfabric_owd_p99_seconds" not in shipped  # the agents write it
