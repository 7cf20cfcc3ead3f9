"""The agent's /metrics text: clock sync and telemetry samples, as Prometheus parses them."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from clockfabric.agent.metrics import AgentMetrics, clock_metrics
from clockfabric.telemetry.base import Collector, Collectors, Metric

STATE = {
    "host": "h1",
    "mapping": {"t0_ns": 1, "offset_ns": 1500.0, "drift": 2e-6, "uncertainty_ns": 40.0, "synced": True},
    "parts": 1,
    "pairs": {"h2": {"exchanges": 120, "steps": 1}},
    "owd": [{"src": "h1", "dst": "h2", "path": "eth0:7300", "n": 9, "min_ns": 20_000, "p50_ns": 21_000.0,
             "p99_ns": 30_000.0, "floor_ns": 19_500},
            {"src": "h2", "dst": "h1", "path": "eth0:7300", "n": 9, "min_ns": 22_000, "p50_ns": 23_000.0,
             "p99_ns": 35_000.0, "floor_ns": 21_000}],
    "counters": {"exchanges": 240, "malformed_packets": 3},
}


class Broken(Collector):
    name = "broken"

    def absent(self):
        return None

    def collect(self):
        raise OSError("device vanished")


class Missing(Collector):
    name = "missing"

    def absent(self):
        return "no such hardware"

    def collect(self):  # never called: absent collectors cost nothing
        raise AssertionError("collect() of an absent collector")


class Fixed(Collector):
    name = "fixed"

    def absent(self):
        return None

    def collect(self):
        return [Metric("node_network_carrier_changes_total", 4, {"device": "eth0"}, "counter", "flaps")]


def scrape(metrics: AgentMetrics) -> dict[tuple[str, frozenset], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    text = generate_latest(registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_clock_state_becomes_metrics_in_seconds_with_direction_and_peer():
    got = {(m.name, tuple(sorted(m.labels.items()))): m.value for m in clock_metrics(STATE)}
    assert got[("clockfabric_clock_offset_seconds", ())] == pytest.approx(1.5e-6)
    assert got[("clockfabric_clock_synced", ())] == 1.0
    out = (("direction", "out"), ("path", "eth0:7300"), ("peer", "h2"))
    back = (("direction", "back"), ("path", "eth0:7300"), ("peer", "h2"))
    assert got[("clockfabric_owd_floor_seconds", out)] == pytest.approx(19.5e-6)
    assert got[("clockfabric_owd_p99_seconds", back)] == pytest.approx(35e-6)
    assert got[("clockfabric_probe_malformed_packets_total", ())] == 3


def test_exposition_parses_and_one_broken_collector_takes_no_other_down():
    metrics = AgentMetrics("h1", Collectors([Broken(), Missing(), Fixed()]), lambda: STATE)
    samples = scrape(metrics)
    host = ("host", "h1")
    assert samples[("node_network_carrier_changes_total", frozenset({host, ("device", "eth0")}))] == 4
    assert samples[("clockfabric_collector_up", frozenset({host, ("collector", "broken")}))] == 0
    assert samples[("clockfabric_collector_up", frozenset({host, ("collector", "fixed")}))] == 1
    assert not any(labels and ("collector", "missing") in labels for _, labels in samples)
    assert samples[("clockfabric_clock_pair_steps_total", frozenset({host, ("peer", "h2")}))] == 1
    assert metrics.collectors.collect().status["missing"] == "not present: no such hardware"


def test_before_the_first_update_only_telemetry_is_served():
    samples = scrape(AgentMetrics("h1", Collectors([Fixed()]), lambda: None))
    assert {name for name, _ in samples} == {"node_network_carrier_changes_total", "clockfabric_collector_up",
                                             "clockfabric_collector_duration_seconds"}
