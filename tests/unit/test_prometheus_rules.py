"""The Prometheus rules in deploy/prometheus: valid, every alert tested by promtool on written
series, and the Kubernetes PrometheusRule carrying the very same groups."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "clockfabric-rules.yml"
RULE_TESTS = sorted((DEPLOY / "prometheus" / "tests").glob("*.yml"))
PROMETHEUS_RULE = DEPLOY / "kubernetes" / "base" / "prometheusrule.yaml"

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool is not installed (scripts/setup.sh installs prometheus)")


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120, cwd=RULES.parent)


def alert_names() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r["alert"] for g in groups for r in g["rules"] if "alert" in r]


@needs_promtool
def test_promtool_checks_the_rules():
    proc = promtool("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_promtool
def test_promtool_unit_tests_pass():
    proc = promtool("test", "rules", *map(str, RULE_TESTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("SUCCESS") == len(RULE_TESTS)


def test_every_alert_has_a_test_where_it_fires_and_one_where_it_does_not():
    fires, quiet = set(), set()
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert alert_names(), "no alerting rules found"
    assert set(alert_names()) <= fires, f"never seen firing: {set(alert_names()) - fires}"
    assert set(alert_names()) <= quiet, f"never seen quiet: {set(alert_names()) - quiet}"


def test_alerts_carry_a_severity_and_a_summary():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    for rule in (r for g in groups for r in g["rules"] if "alert" in r):
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]


def test_the_kubernetes_prometheusrule_holds_the_same_groups():
    rule = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"], (
        f"{PROMETHEUS_RULE.name} differs from {RULES.name}: run deploy/kubernetes/render-prometheusrule.py")
