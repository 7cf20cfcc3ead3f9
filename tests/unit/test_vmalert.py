"""vmalert beside the series engine, real binaries on loopback: a bare controller's vmalert loads
every shipped rule, is started again when killed and goes with the controller; a series written
to the engine makes a rule fire in the embedded Alertmanager with the labels docs/alerts.md
promises; vmalert away leaves the controller ready, degraded, with an alert of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml
from fastapi.testclient import TestClient

from clockfabric import serieswire
from clockfabric.controller.alertmanager_embedded import EmbeddedAlertmanager
from clockfabric.controller.app import create_app
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.monitor import Monitor
from clockfabric.controller.rules import BRIDGE, RULES
from clockfabric.controller.series.path import SeriesPath
from clockfabric.controller.series.vmalert import RuleOptions
from clockfabric.controller.storage.sqlite import SqliteStorage
from tests.ports import controller_port
from tests.unit.test_alertmanager import answers
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "t" * 32


def rule_names(*files: Path) -> list[str]:
    return sorted(r.get("alert") or r["record"] for f in files
                  for g in yaml.safe_load(f.read_text())["groups"] for r in g["rules"])


def loaded(vmalert_url: str) -> list[dict]:
    """vmalert's rules that it has evaluated at least once."""
    groups = httpx.get(f"{vmalert_url}/api/v1/rules", timeout=2).json()["data"]["groups"]
    return [r for g in groups for r in g["rules"] if not r["lastEvaluation"].startswith("0001")]


def children(pid: int, name: str) -> list[int]:
    """`pid`'s child processes running `name`."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            if Path(f"/proc/{child}/comm").read_text().strip() == name:
                out.append(int(child))
    return out


def test_the_deploy_rules_are_the_packaged_rules_and_vmalert_accepts_them():
    """One copy: deploy/ links to the package's file, which an installed wheel carries."""
    deploy = ROOT / "deploy" / "prometheus" / "clockfabric-rules.yml"
    assert deploy.is_symlink() and deploy.resolve() == RULES
    assert '"clockfabric.controller.rules" = ["*.yml"]' in (ROOT / "pyproject.toml").read_text()
    done = subprocess.run(["vmalert", "-dryRun", f"-rule={RULES}", f"-rule={BRIDGE}"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_bare_controller_evaluates_every_rule_restarts_vmalert_and_takes_it_down(tmp_path):
    listen = f"http://127.0.0.1:{controller_port()}"  # and the port above it free, for the series gate
    argv = [sys.executable, "-m", "clockfabric.cli", "controller", "--db", str(tmp_path / "fleet.db"),
            "--listen", listen.removeprefix("http://"), "--token-file", str(tmp_path / "token"), "--new-token",
            "--rules-interval", "0.5"]
    log = tmp_path / "controller.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url_file = tmp_path / "fleet.db.series" / "vmalert" / "url"
    try:
        wait_for("the controller up", lambda: proc.poll() is None and url_file.exists()
                 and answers(f"{listen}/healthz"), timeout_s=20)
        vmalert = url_file.read_text().strip()
        assert f"rules by vmalert {vmalert}" in " ".join(log.read_text().split())
        rules = wait_for("every rule evaluated", lambda: len(r := loaded(vmalert)) == len(rule_names(RULES, BRIDGE))
                         and r, timeout_s=10)
        assert sorted(r["name"] for r in rules) == rule_names(RULES, BRIDGE)
        assert [(r["name"], r["lastError"]) for r in rules if r["health"] != "ok"] == []

        (first,) = children(proc.pid, "vmalert")
        os.kill(first, signal.SIGKILL)
        wait_for("vmalert started again", lambda: (now := children(proc.pid, "vmalert")) and now != [first]
                 and answers(f"{vmalert}/health"), timeout_s=5)
        wait_for("readyz not degraded", lambda: "degraded" not in httpx.get(f"{listen}/readyz").json(), timeout_s=5)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    wait_for("vmalert gone with the controller", lambda: not answers(f"{vmalert}/health"), timeout_s=5)


def fast(rules: Path, to: Path) -> Path:
    """The shipped rules, each alert firing as soon as it holds (no `for`)."""
    doc = yaml.safe_load(rules.read_text())
    for g in doc["groups"]:
        for r in g["rules"]:
            r.pop("for", None)
    to.write_text(yaml.safe_dump(doc))
    return to


def test_a_sample_over_the_sla_fires_in_alertmanager_and_vmalert_away_degrades(tmp_path):
    am = EmbeddedAlertmanager(tmp_path / "am").start()
    storage = SqliteStorage(tmp_path / "c.db", quick_check_s=0)
    series = SeriesPath(data_dir=tmp_path / "series", fleet_token=TOKEN,
                        rules=RuleOptions((am.url,), (fast(RULES, tmp_path / "rules.yml"),), 0.3,
                                          "http://ctl.example:7400"))
    try:
        series.start()
        assert series.engine is not None and series.rules is not None
        # what an agent writes: its probes' p99 to h2 on path p1, 2.5 ms (the SLA: 1 ms)
        line = serieswire.line("owd_p99_ns", 2_500_000, {"src": "h0", "dst": "h2", "path": "p1"},
                               time.time_ns() // 10**6, host="h0")
        assert httpx.post(f"{series.url}/api/v1/import/prometheus", content=line).status_code == 204

        def breach() -> list[dict]:
            # a new series is searchable ~10 s after the engine takes it (1.79's index), the sample's
            # and then the recorded one's: flushed here, so that the test waits for vmalert alone
            httpx.get(f"{series.url}/internal/force_flush")
            return [a for a in httpx.get(f"{am.url}/api/v2/alerts").json()
                    if a["labels"]["alertname"] == "ClockfabricLatencySLABreach"]

        (alert,) = wait_for("the SLA breach in Alertmanager", breach, timeout_s=15)
        labels = alert["labels"]
        assert {k: labels.get(k) for k in ("host", "peer", "path", "severity")} == \
            {"host": "h0", "peer": "h2", "path": "p1", "severity": "warning"}
        assert "h0 -> h2 above 1 ms" in alert["annotations"]["summary"]
        assert alert["generatorURL"] == "http://ctl.example:7400/dashboard/"

        monitor = Monitor.create(storage)
        fleet = Fleet(storage, hosts=["h0"], stale_s=60, monitor=monitor, series=series)
        with TestClient(create_app(fleet, TOKEN, tick_s=0.05, check_s=0.05)) as client:
            wait_for("ready", lambda: client.get("/readyz").status_code == 200, timeout_s=5)
            series.rules.stop()  # its watchdog too: it stays away
            r = wait_for("degraded", lambda: (r := client.get("/readyz")).json().get("degraded") and r, timeout_s=5)
            assert r.status_code == 200 and "vmalert" in r.json()["degraded"]["rules"]
            wait_for("the alert", lambda: "rules_down" in monitor.alerts.open_by_kind(), timeout_s=5)
            series.rules.start()
            wait_for("not degraded", lambda: "degraded" not in client.get("/readyz").json(), timeout_s=5)
            wait_for("the alert resolved", lambda: "rules_down" not in monitor.alerts.open_by_kind(), timeout_s=5)
    finally:
        series.stop()
        storage.close()
        am.stop()
