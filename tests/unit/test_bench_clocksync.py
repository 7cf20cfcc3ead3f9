"""`bench clocksync`'s loaded scenarios: who sends to whom, and the verdicts on their figures."""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace

import pytest

from clockfabric.bench.clocksync import watch as clocksync_watch
from clockfabric.bench.clocksync.command import lab_name
from clockfabric.bench.clocksync.report import quiet_hosts, targets, verdicts
from clockfabric.bench.clocksync.traffic import flows_for
from clockfabric.bench.clocksync.watch import Fabric
from clockfabric.errors import ClockfabricError

LEAVES = {"leaf0": ["h1", "h2", "h3", "h4"], "leaf1": ["h5", "h6", "h7", "h8"]}


def fabric() -> SimpleNamespace:
    return SimpleNamespace(leaves=LEAVES, reference="h1")


def test_loaded_reference_sends_and_receives_across_leaves():
    flows = flows_for(fabric(), "R")  # type: ignore[arg-type]
    assert ("h1", "h5") in flows and ("h8", "h1") in flows
    assert len(flows) == 2  # every other host's own link stays quiet but for one partner each way


def test_prioritized_scenario_loads_every_host_both_ways():
    flows = flows_for(fabric(), "P")  # type: ignore[arg-type]
    assert flows == flows_for(fabric(), "C+")  # the same load as the FIFO fabric's C+
    hosts = {h for leaf in LEAVES.values() for h in leaf}
    assert {a for a, _ in flows} == hosts and {b for _, b in flows} == hosts


def test_quiet_hosts_are_judged_from_the_load_on_and_leave_out_the_busy_ones():
    errors = [(10.0, 0, "h2", 90_000.0)]  # before the load: not judged
    errors += [(20.0 + i, 0, "h2", -300.0) for i in range(50)] + [(20.0 + i, 0, "h4", 700.0) for i in range(50)]
    errors += [(20.0, 0, "h3", 50_000.0), (21.0, 0, "h4", -1_500.0)]
    q = quiet_hosts(errors, 15.0, {"h1", "h3"})
    assert q["hosts"] == ["h2", "h4"] and q["worst_host"] == "h4"
    assert q["worst_p99_ns"] == pytest.approx(1_500.0, rel=0.5) and q["worst_max_ns"] == 1_500.0
    assert quiet_hosts(errors, 15.0, {"h2", "h3", "h4"})["worst_p99_ns"] is None


def result(key: str, ours_p99: float, coverage: float | None = 0.995, **extra) -> dict:
    methods = {"clockfabric": {"p99_ns": ours_p99}, "ntp_min_rtt": {"p99_ns": 20 * ours_p99},
               "ptp4l": {"p99_ns": 5 * ours_p99}}
    return {"hosts": 8, "scenario": key, "name": key.lower(), "methods": methods,
            "ratio_p99": {b: methods[b]["p99_ns"] / ours_p99 for b in ("ntp_min_rtt", "ptp4l")},
            "bound": {"coverage": coverage, "bound_p50_ns": 400.0, "bound_p99_ns": 2_000.0},
            "sync": {"reference": "h1", "converged_s": 9.0}, "agents_up_s": 6.0, "converged_after_up_s": 3.0,
            **extra}


def by_target(checks: list[dict]) -> dict[str, dict]:
    return {v["target"]: v for v in checks}


def test_prioritized_fabric_is_held_to_the_loaded_targets():
    checks = by_target(verdicts([result("P", 800.0)]))
    assert checks["p99 <= 1000 ns under load"]["met"]
    assert checks["ntp_min_rtt p99 / ours p99 >= 10"]["met"]
    assert not checks["ptp4l p99 / ours p99 >= 10"]["met"]  # 5x: short of the bar
    assert all("not expected" not in v["note"] for v in checks.values())
    assert not any(t.startswith("converged") for t in checks)  # saturated from the start


def test_loaded_reference_verdicts():
    r = result("R", 900.0, quiet_hosts={"hosts": ["h2", "h3"], "worst_p99_ns": 2_500.0, "worst_max_ns": 4_000.0},
               reference_named={"after_s": 7.5, "reason": "holdover: asymmetric: every path queued"})
    checks = by_target(verdicts([r]))
    quiet = checks["quiet hosts' worst p99 <= 2000 ns once loaded"]
    assert not quiet["met"] and quiet["value"] == "2,500 ns"
    named_target = "loaded reference named unsynced within 10 s of the load starting"
    named = checks[named_target]
    assert named["met"] and named["value"] == "7.5 s" and "asymmetric" in named["note"]
    r["reference_named"] = {"after_s": None, "reason": None}
    assert not by_target(verdicts([r]))[named_target]["met"]


@pytest.mark.parametrize("coverage, met", [(0.995, True), (0.98, False), (None, False)])
def test_every_scenario_reports_bound_coverage(coverage, met):
    extra = {"quiet_hosts": {"hosts": [], "worst_p99_ns": None, "worst_max_ns": None}, "reference_named": {}}
    for key in ("A", "R", "P"):
        row = by_target(verdicts([result(key, 500.0, coverage, probes=None, cpu=None, **extra)]
                                 if key != "A" else [result(key, 150.0, coverage, **idle_extra())]))
        assert row["bound covers |error| in >= 99% of samples"]["met"] is met


def idle_extra() -> dict:
    return {"probes": {"wire_max_share_of_link": 0.0002, "total_max_share_of_link": 0.0003, "total_max_host": "h1"},
            "cpu": {"max_pct": 1.0, "mean_pct": 0.8}}


def test_coverage_target_reads_back_as_a_percentage():
    (t,) = [t for t in targets(verdicts([result("P", 500.0, 0.9951)])) if "bound covers" in t.name]
    assert (t.value, t.bar, t.better) == (pytest.approx(99.51), 99.0, "higher")


def test_port_counters_add_up_every_class_queue(monkeypatch):
    """With traffic classes a port has one FIFO per class: drops and queue lengths are the sum."""
    qdiscs = [{"kind": "htb", "root": True, "dev": "eth0", "bytes": 5_000},
              {"kind": "bfifo", "dev": "eth0", "drops": 2, "qlen": 1},
              {"kind": "bfifo", "dev": "eth0", "drops": 3, "qlen": 40}]
    monkeypatch.setattr(clocksync_watch.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, json.dumps(qdiscs), ""))
    fab = Fabric.__new__(Fabric)
    fab.topo = SimpleNamespace(nodes=lambda: ["h1"])
    fab.lab = SimpleNamespace(ns=lambda node: f"lab-{node}")
    assert fab.tc() == {("h1", "eth0"): {"bytes": 5_000, "drops": 5, "qlen": 41}}


def test_ddp_job_scenario_is_held_to_two_microseconds():
    job = {"steps": 240, "median_step_s": 0.12}
    links = {"host_util_max": 0.3}
    checks = by_target(verdicts([result("J", 1_500.0, job=job, links=links)]))
    row = checks["p99 <= 2000 ns with a DDP job on every host"]
    assert row["met"] and "240 steps" in row["note"] and "120 ms" in row["note"] and "30%" in row["note"]
    assert not by_target(verdicts([result("J", 2_500.0, job=job, links=links)]))[row["target"]]["met"]
    assert "p99 <= 1000 ns under load" not in checks  # J has its own bar


def test_reference_named_counts_from_the_load_start():
    watch = clocksync_watch.Watch.__new__(clocksync_watch.Watch)
    watch.named = {"h1": [(5.0, "unsynced: no pure probe pair"), (12.5, "holdover: asymmetric")]}
    assert watch.named_after("h1", 10.0) == {"after_s": 2.5, "reason": "holdover: asymmetric"}
    assert watch.named_after("h1", 13.0) == {"after_s": None, "reason": None}
    assert watch.named_after("h2", 0.0)["after_s"] is None


def test_convergence_is_judged_from_every_agent_running_at_five_seconds():
    target = "converged within 5 s of every agent running"
    met = by_target(verdicts([result("D", 100.0, step={"reconverged_s": 1.0})]))
    assert met[target]["met"] and "agents all up after 6.0 s" in met[target]["note"]
    assert not any("`sync` start" in t for t in met)  # the agents' start-up is reported, not judged
    late = result("D", 100.0, step={"reconverged_s": 1.0}, converged_after_up_s=5.5)
    assert not by_target(verdicts([late]))[target]["met"]


def test_the_labs_are_named_by_prefix_so_two_runs_need_not_collide():
    assert [lab_name("csbench", 32, False), lab_name("mine", 8, True)] == ["csbench-32", "mine-8p"]
    with pytest.raises(ClockfabricError):
        lab_name("No/Such", 8, False)


def test_two_loaded_hosts_each_trade_with_one_partner_and_leave_the_reference_out():
    flows = flows_for(fabric(), "L2")  # type: ignore[arg-type]
    assert flows == [("h2", "h5"), ("h5", "h2"), ("h6", "h3"), ("h3", "h6")]  # h2, h6 loaded; h4, h7, h8 quiet
    assert flows_for(fabric(), "R0") == flows_for(fabric(), "R")  # type: ignore[arg-type]
