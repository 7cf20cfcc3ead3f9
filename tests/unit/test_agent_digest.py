"""What a host works out of its paths' delays for the controller's detectors (agent.digest)."""

from __future__ import annotations

import pytest

from clockfabric.agent import digest

MARGIN = digest.Ask(50_000.0)


def delays(dst: str, path: str, floor: float, p50: float, mn: float | None = None, src: str = "h0") -> list[dict]:
    labels = {"src": src, "dst": dst, "path": path}
    return [{"name": f"owd_{stat}_ns", "value": v, "labels": labels}
            for stat, v in (("floor", floor), ("p50", p50), ("min", floor if mn is None else mn), ("p99", p50 * 2))]


def named(samples: list[dict], name: str) -> dict:
    return {(s["labels"].get("dst"), s["labels"].get("path")): s["value"] for s in samples if s["name"] == name}


def test_a_report_each_write_and_only_the_paths_past_the_margin():
    samples = (delays("h1", "a", 10_000, 70_000) + delays("h1", "b", 10_000, 59_000)
               + delays("h2", "a", 10_000, 61_000) + delays("h2", "b", 20_000, 20_000))
    out = digest.queueing(samples, "h0", [("h1", "a"), ("h1", "b"), ("h2", "a"), ("h2", "b")], MARGIN)
    assert named(out, digest.REPORT) == {(None, None): 4.0}
    assert named(out, digest.QUEUEING) == {("h1", "a"): 60_000.0, ("h2", "a"): 51_000.0}
    assert named(out, digest.UNMEASURED) == {}


def test_the_statistic_asked_for_and_the_margin_itself_is_not_past_it():
    samples = delays("h1", "a", 10_000, 900_000, mn=60_000) + delays("h1", "b", 10_000, 900_000, mn=400_000)
    out = digest.queueing(samples, "h0", [], digest.Ask(50_000.0, "min"))
    assert named(out, digest.QUEUEING) == {("h1", "b"): 390_000.0}  # a: exactly the margin over


def test_a_mapped_path_with_no_delay_is_unmeasured_and_another_hosts_rows_are_not_ours():
    samples = delays("h1", "a", 10_000, 11_000) + delays("h0", "a", 10_000, 900_000, src="h1")
    out = digest.queueing(samples, "h0", [("h1", "a"), ("h1", "b"), ("h2", "a")], MARGIN)
    assert named(out, digest.UNMEASURED) == {("h1", "b"): 1.0, ("h2", "a"): 1.0}
    assert named(out, digest.QUEUEING) == {} and named(out, digest.REPORT) == {(None, None): 1.0}


def test_a_flow_gets_its_far_hosts_lowest_floor_and_the_most_any_of_its_paths_sees():
    flow = {"jobid": "7", "flow": "10.0.0.1->10.0.0.3"}
    samples = (delays("h2", "a", 12_000, 14_000) + delays("h2", "b", 10_000, 90_000) + delays("h1", "a", 1_000, 1_000)
               + [{"name": "job_flow_owd_out_p50_ns", "value": 400_000.0, "labels": flow},
                  {"name": "job_flow_tx_bps", "value": 1e9, "labels": flow},
                  {"name": "job_flow_owd_out_p50_ns", "value": 1.0, "labels": {"jobid": "7", "flow": "10.0.0.1->192.0.2.9"}},
                  {"name": "job_flow_owd_out_p50_ns", "value": 1.0, "labels": {"jobid": "7", "flow": "not a pair"}}])
    out = digest.flow_probes(samples, "h0", {"10.0.0.1": "h0", "10.0.0.2": "h1", "10.0.0.3": "h2"})
    assert [(s["name"], s["value"], s["labels"]) for s in out] == [
        (digest.PROBE_FLOOR, 10_000, flow), (digest.PROBE_LEVEL, 90_000, flow)]


@pytest.mark.parametrize("answer", [{}, {"congestion": None}, {"congestion": {"margin_ns": -1, "stat": "p50"}},
                                    {"congestion": {"margin_ns": True, "stat": "p50"}},
                                    {"congestion": {"margin_ns": 5, "stat": "p99"}},
                                    {"congestion": {"margin_ns": "5", "stat": "p50"}}])
def test_an_answer_with_no_ask_or_a_malformed_one_asks_nothing(answer):
    assert digest.Ask.heard(answer) is None


def test_an_answers_ask():
    assert digest.Ask.heard({"events": 1, "congestion": {"margin_ns": 20_000, "stat": "min"}}) == \
        digest.Ask(20_000.0, "min")
