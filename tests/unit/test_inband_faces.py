"""In-band one-way delays on the faces: the agent's pushed samples and /metrics (labels jobid, flow,
direction: never job), the controller's job detail, and the `job show` column."""

from __future__ import annotations

import pytest

from clockfabric.agent.metrics import workload_metrics
from clockfabric.cli.job_cmds import _owd
from clockfabric.controller.jobs import flows_of
from clockfabric.controller.series.sample import Sample
from clockfabric.traffic.steer_decide import FlowKey
from clockfabric.workload import samples
from clockfabric.workload.flows import FlowRates, SocketReading
from clockfabric.workload.monitor import JobFlow, WorkloadView
from clockfabric.workload.owd import OwdStats

LABEL = "10.0.0.1:40000->10.0.0.2:5201"  # the agent's delays are per connection
GROUP = "10.0.0.1->10.0.0.2"  # its series, per flow group
OWD = {LABEL: {"out": OwdStats(4_000_000, 4_800_000, 5_000_000, 90, "inband"), "in": OwdStats.fallback(200)}}


def view():
    reading = SocketReading(FlowKey("10.0.0.1", 40000, "10.0.0.2", 5201), 1, 1, 10, 0, 0, 200, 10, 0.0)
    return WorkloadView(flows=[JobFlow("J", 7, FlowRates(reading, None, None, 0))])


def test_pushed_samples_carry_both_directions_and_the_controller_puts_them_back_together():
    pushed = [s for s in samples.push_samples(view(), OWD) if s["name"].startswith("job_flow_owd_")]
    assert {s["name"] for s in pushed} == set(samples.OWD_SAMPLES)
    by_stat = {}
    for s in pushed:
        by_stat.setdefault(s["name"], []).append(Sample("h1", 10, s["name"], s["value"], s["labels"]))
    [row] = flows_of("J", by_stat, {}, now_ns=11)
    assert row["flow"] == GROUP and row["local"] == "10.0.0.1" and row["remote"] == "10.0.0.2"
    assert row["owd"]["out"] == {"min_ns": 4_000_000, "p50_ns": 4_800_000, "p99_ns": 5_000_000, "samples": 90,
                                 "source": "inband"}
    assert row["owd"]["in"] == {"min_ns": 100_000, "p50_ns": 100_000, "p99_ns": 100_000, "samples": 0,
                                "source": "rtt/2"}
    assert not any(k.startswith("owd_") for k in row)


def test_a_flow_without_delays_shows_none_and_a_dash():
    [row] = flows_of("J", {"job_flow_rtt_us": [Sample("h1", 10, "job_flow_rtt_us", 200.0,
                                                      {"jobid": "J", "flow": GROUP})]}, {}, now_ns=11)
    assert row["owd"] == {"out": None, "in": None}
    assert _owd(row["owd"]) == "-"


def test_the_column_marks_the_fallback():
    shown = _owd({d: s.as_dict() for d, s in OWD[LABEL].items()})
    assert shown == "out 4.80 ms / 5.00 ms, in 100 us (RTT/2)"


def test_metrics_have_a_direction_label_and_never_job():
    state = {"workload": {**samples.state(view(), OWD), "cpu_seconds": 0.0,
                          "inband": {"capturing": True, "sampled_packets": 5, "cpu_seconds": 0.1}}}
    found = [m for m in workload_metrics(state) if m.name.startswith("clockfabric_job_flow_owd_")]
    p50 = {m.labels["direction"]: m.value for m in found if m.name == "clockfabric_job_flow_owd_p50_seconds"}
    assert p50 == {"out": pytest.approx(4.8e-3), "in": pytest.approx(1e-4)}
    fallback = {m.labels["direction"]: m.value for m in found if m.name == "clockfabric_job_flow_owd_fallback"}
    assert fallback == {"out": 0.0, "in": 1.0}
    assert all("job" not in m.labels and m.labels["jobid"] == "J" for m in found)
