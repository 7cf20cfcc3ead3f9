"""The fleet audit on real labs: a clean lab passes, six planted faults are each named (host and
NIC) with nothing else failing, a hung host is named without holding up the rest, and a cable
swap is undone by swapping again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clockfabric.audit import expect
from clockfabric.audit.registry import select
from clockfabric.audit.run import audit
from clockfabric.lab import check, impair
from clockfabric.lab.hosts import lab_audit
from clockfabric.topology import Port, multirail

ROOT = Path(__file__).resolve().parents[2]
BAD = ("fail", "unknown")


def run_audit(lab, only=(), skip=(), **overrides):
    expectations = expect.defaults()
    for section, values in overrides.items():
        expectations[section].update(values)
    topo = lab.topology
    return audit(topo, sorted(topo.hosts), select(list(only), list(skip)), **lab_audit(lab),
                 expect=expectations, fleet=lab.name)


def bad_findings(report) -> set[tuple[str, str, str]]:
    return {(c.id, f.host, f.device) for c in report.results for f in c.findings if f.verdict.value in BAD}


# Links this machine can carry at full rate: two cores forward about 1 Gbit/s through the lab in all
# (docs/collective.md), less than an all-reduce over 100 Mbit/s links on both planes asks for.
RATE = "25mbit"
# On this 2-core VM lab rings and pairs read 0.5-0.9 of expected from one run to the next
# (2026-11-23, with the lockstep ring as with the pipelined one), where real NICs hold steady. So
# the tests give each ring step 100 ms of link time (the default 25 ms is 78 KB at this rate, much
# of it per-step cost) and call a NIC slow below 0.45. The planted quarter-rate link reads about
# 0.22: still half of that.
COLLECTIVE = {"step_ms": 100.0, "min_ratio": 0.45}


def test_clean_lab_passes_every_check(make_lab):
    lab = make_lab(multirail(hosts=4, planes=2, leaves=2, spines=2, host_rate=RATE))
    report = run_audit(lab, collective=COLLECTIVE)
    assert not bad_findings(report), json.dumps(report.as_dict(), indent=1)
    verdicts = {c.id: c.verdict.value for c in report.results}
    # what the lab has, each judged for real (only GPUs, RDMA and PCIe are absent here)
    for cid in ("configuration.software", "frontend.names", "frontend.mtu", "backend.cabling",
                "backend.connectivity", "backend.latency", "collective.allreduce"):
        assert verdicts[cid] == "pass", (cid, verdicts)
    sweep = report.expectations["collective.sweep"]
    assert {(r["algorithm"], r["subflows"]) for r in sweep} == {(a, k) for a in ("ring", "hier") for k in (1, 2, 4, 8)}
    per_plane = report.expectations["collective.per_plane"]
    assert [r["planes"] for r in per_plane] == [[0], [1]] and all(r["ratio"] >= COLLECTIVE["min_ratio"] for r in per_plane)
    assert all(r["wrong"] == 0 for r in sweep + per_plane)


def test_seeded_faults_are_each_named_and_nothing_else_fails(make_lab):
    lab = make_lab(multirail(hosts=8, planes=2, leaves=2, spines=2, host_rate=RATE))  # dualplane-8's shape
    planted = subprocess.run([sys.executable, str(ROOT / "examples" / "seeded_faults.py"), "--lab", lab.name],
                             capture_output=True, text=True, check=True)
    faults = json.loads(planted.stdout)
    assert len(faults) == 7
    report = run_audit(lab, collective=COLLECTIVE)
    found = bad_findings(report)
    expected = {("configuration.software", "h6", ""), ("frontend.mtu", "h2", "eth0"),
                ("backend.nic_active", "h1", "eth1"), ("backend.cabling", "h3", "eth0"),
                ("backend.cabling", "h4", "eth0"), ("backend.latency", "h7", "eth1"),
                ("collective.allreduce", "h5", "eth1")}
    assert found == expected, json.dumps(report.as_dict(), indent=1)
    assert report.exit_code == 2
    planted_where = {(f["host"], f["nic"]) for f in faults} | {(f["host"], "") for f in faults}
    warned = {(f.host, f.device) for c in report.results for f in c.findings if f.verdict.value == "warn"}
    assert warned <= planted_where, warned  # warnings too land only where a fault is


def test_a_hung_host_is_named_and_the_rest_report(make_lab):
    lab = make_lab(multirail(hosts=3, planes=1, leaves=1, spines=1))
    hang = lab.dir / "hang"
    hang.mkdir()
    (hang / "sitecustomize.py").write_text("import time\ntime.sleep(60)\n")  # Python on h1 never starts
    lab.set_host_env("h1", {"PYTHONPATH": str(hang)})
    report = run_audit(lab, only=["frontend.reach", "configuration.software"], timeouts={"host_s": 8.0})
    reach = next(c for c in report.results if c.id == "frontend.reach")
    assert [(f.host, f.verdict.value) for f in reach.findings] == [("h1", "fail")]
    assert "no answer within 8 s" in reach.findings[0].message
    assert report.seconds < 20  # the 60 s hang does not hold the audit up
    software = next(c for c in report.results if c.id == "configuration.software")
    assert software.summary.endswith("on 2 hosts")


def test_cable_swap_and_back(make_lab, cli):
    lab = make_lab(multirail(hosts=4, planes=1, leaves=2, spines=1))
    a, b = Port("h0", "eth0"), Port("h2", "eth0")
    impair.swap_cables(lab, a, b)
    assert lab.cables() == {"h0:eth0": "h2:eth0", "h2:eth0": "h0:eth0"}
    report = run_audit(lab, only=["backend.cabling"])
    assert bad_findings(report) == {("backend.cabling", "h0", "eth0"), ("backend.cabling", "h2", "eth0")}
    with pytest.raises(Exception, match="already has another host's cable"):
        impair.swap_cables(lab, a, Port("h1", "eth0"))
    cli("lab", "swap", "h0:eth0", "h2:eth0", "--lab", lab.name)
    assert lab.cables() == {}
    assert all(p.ok for p in check.check(lab))
    assert not bad_findings(run_audit(lab, only=["backend.cabling", "backend.connectivity"]))
