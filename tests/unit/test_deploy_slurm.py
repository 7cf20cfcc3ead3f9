"""deploy/slurm/node-audit: only a real audit failure on this node drains it; a usage error, an
unknown verdict, a timeout or a missing report never do. Run against a stand-in CLI and scontrol."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SLURM = ROOT / "deploy" / "slurm"


def report(*findings: tuple[str, str, str, str], exit_code: int = 2) -> dict:
    """A report as `clockfabric audit --json` writes it: (check, host, device, verdict) findings."""
    checks: dict[str, list] = {}
    for check, host, device, verdict in findings:
        checks.setdefault(check, []).append({"verdict": verdict, "message": f"{check} is wrong", "host": host,
                                             "device": device, "evidence": {}})
    return {"verdict": "fail", "exit_code": exit_code, "counts": {},
            "checks": [{"id": c, "verdict": "fail", "summary": "", "findings": f} for c, f in checks.items()]}


@pytest.fixture
def node(tmp_path):
    """Run a role of node-audit on node n1, the CLI answering `code` with `stdout`."""
    calls = tmp_path / "scontrol.calls"
    (tmp_path / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    (tmp_path / "scontrol").chmod(0o755)

    def run(role: str, code: int, stdout: str = "", *, sleep_s: float = 0.0, extra: str = ""):
        (tmp_path / "out.json").write_text(stdout)
        cli = tmp_path / "clockfabric"
        cli.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/argv\nsleep {sleep_s}\ncat {tmp_path}/out.json\n"
                       f"echo 'last error line' >&2\nexit {code}\n")
        cli.chmod(0o755)
        (tmp_path / "clockfabric.conf").write_text(
            f"# test settings\nCLOCKFABRIC={cli}\nFLEET={tmp_path}/fleet.yaml\nSCONTROL={tmp_path}/scontrol\n"
            f"LOG={tmp_path}/log\nTIMEOUT_S=2\n{extra}")
        env = {**os.environ, "SLURM_CONF": str(tmp_path / "slurm.conf"), "SLURMD_NODENAME": "n1",
               "SLURM_JOB_ID": "42"}
        done = subprocess.run([str(SLURM / role)], env=env, capture_output=True, text=True, timeout=30)
        drains = calls.read_text().splitlines() if calls.exists() else []
        calls.unlink(missing_ok=True)
        log = tmp_path / "log"
        return done.returncode, drains, (log.read_text() if log.exists() else "") + done.stderr

    run.tmp = tmp_path
    return run


def test_a_failure_on_this_node_drains_it_and_fails_the_prolog(node):
    code, drains, log = node("prolog", 2, json.dumps(report(("frontend.mtu", "n1", "eth0", "fail"),
                                                            ("backend.cabling", "n2", "eth1", "fail"))))
    assert code == 1  # Slurm requeues the job elsewhere
    assert drains == ["update NodeName=n1 State=DRAIN Reason=clockfabric audit: frontend.mtu eth0: "
                      "frontend.mtu is wrong"]
    assert "prolog on n1 (job 42): drained" in log
    argv = (node.tmp / "argv").read_text().split()
    assert argv == ["audit", "--hosts", f"{node.tmp}/fleet.yaml", "--passive", "--json", "--skip", "backend.cabling"]


def test_node_in_the_audit_options_is_this_node(node):
    node("prolog", 0, json.dumps(report(exit_code=0)), extra="AUDIT_ARGS=--host {node} --expect /etc/expect.yaml\n")
    argv = (node.tmp / "argv").read_text().split()
    assert argv[-4:] == ["--host", "n1", "--expect", "/etc/expect.yaml"]


def test_only_the_prolog_leaves_cabling_out(node):
    for role in ("epilog", "healthcheck"):
        node(role, 0, json.dumps(report(exit_code=0)))
        argv = (node.tmp / "argv").read_text().split()
        assert argv == ["audit", "--hosts", f"{node.tmp}/fleet.yaml", "--passive", "--json"], role


def test_epilog_and_health_check_drain_without_failing(node):
    failing = json.dumps(report(("backend.nic_active", "n1", "eth1", "fail")))
    for role in ("epilog", "healthcheck"):
        code, drains, _ = node(role, 2, failing)
        assert (code, len(drains)) == (0, 1), role


def test_failures_elsewhere_leave_this_node_in_service(node):
    code, drains, log = node("prolog", 2, json.dumps(report(("frontend.mtu", "n2", "eth0", "fail"),
                                                            ("configuration.software", "n1", "", "warn"))))
    assert (code, drains) == (0, [])
    assert "passes (the audit's failures are on other hosts); configuration.software: " in log
    assert "NOT DRAINED" not in log


@pytest.mark.parametrize(("code", "stdout", "said"), [
    (64, "", "usage error"),                           # the CLI's usage errors: EX_USAGE
    (2, "", "exited 2 without a report"),              # a usage error of a CLI that still exits 2 for it
    (2, "Traceback (most recent call last):", "exited 2 without a report"),
    (3, json.dumps(report(("backend.gid", "n1", "eth0", "unknown"), exit_code=3)), "could not decide"),
    (1, "", "exited 1 without a report"),              # a crash: Python exits 1
    (127, "", "exited 127"),
])
def test_anything_but_an_audit_failure_is_loud_and_never_drains(node, code, stdout, said):
    rc, drains, log = node("prolog", code, stdout)
    assert (rc, drains) == (0, [])
    assert "NOT DRAINED, CHECK THIS" in log and said in log


def test_this_nodes_own_report_missing_is_not_a_node_fault(node):
    rc, drains, log = node("prolog", 2, json.dumps(report(("frontend.reach", "n1", "", "fail"))))
    assert (rc, drains) == (0, [])
    assert "could not judge this node: frontend.reach" in log


def test_a_hung_audit_times_out_without_draining(node):
    rc, drains, log = node("prolog", 2, json.dumps(report(("frontend.mtu", "n1", "eth0", "fail"))), sleep_s=5)
    assert (rc, drains) == (0, [])
    assert "no answer within 2 s" in log


def test_a_typo_in_the_settings_never_drains(node):
    rc, drains, said = node("prolog", 2, json.dumps(report(("frontend.mtu", "n1", "eth0", "fail"))),
                            extra="AUDIT_ARG=--skip backend\n")
    assert (rc, drains) == (0, [])
    assert "NOT DRAINED, CHECK THIS: cannot read the settings" in said and "clockfabric.conf:7" in said


def test_a_typo_in_the_audit_options_reaches_the_real_cli_and_never_drains(node, tmp_path):
    """The real CLI with an option it does not know: whatever code it gives a usage error, no drain."""
    cli = tmp_path / "real-clockfabric"
    cli.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT / 'src'} exec {sys.executable} -m clockfabric.cli \"$@\"\n")
    cli.chmod(0o755)
    (tmp_path / "fleet.yaml").write_text("hosts: [{name: n1, nics: [{name: eth0, plane: 0}]}]\n")
    conf = tmp_path / "clockfabric.conf"
    conf.write_text(f"CLOCKFABRIC={cli}\nFLEET={tmp_path}/fleet.yaml\nSCONTROL={tmp_path}/scontrol\n"
                    f"LOG={tmp_path}/log\nAUDIT_ARGS=--passiv\n")
    (tmp_path / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/drained\n")
    (tmp_path / "scontrol").chmod(0o755)
    env = {**os.environ, "SLURM_CONF": str(tmp_path / "slurm.conf"), "SLURMD_NODENAME": "n1"}
    done = subprocess.run([str(SLURM / "prolog")], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not (tmp_path / "drained").exists()
    assert "NOT DRAINED, CHECK THIS" in (tmp_path / "log").read_text()


def test_a_wrong_role_is_a_usage_error():
    done = subprocess.run([str(SLURM / "node-audit"), "prolgo"], capture_output=True, text=True)
    assert done.returncode == 64 and "usage:" in done.stderr
