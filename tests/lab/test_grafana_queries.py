"""Every Grafana panel's query returns data from a real Prometheus scraping a real lab's
agents, with the rules of deploy/prometheus loaded; link faults are made so the panels and
alerts about flaps and outages have something to show, and a job runs a flow for the jobs
dashboard."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from clockfabric.agent.config import METRICS_PORT
from clockfabric.lab import impair, netns
from clockfabric.lab.agents import LabAgents
from clockfabric.lab.exec import command
from clockfabric.lab.process import stop
from clockfabric.lab.state import Lab
from clockfabric.topology import multirail
from tests.grafana import DASHBOARDS, load, panel_queries
from tests.lab.test_workload import RECEIVER, SENDER

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "clockfabric-rules.yml"

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None,
                                reason="prometheus is not installed (make setup installs it)")


def query(lab: Lab, address: str, promql: str) -> list[dict]:
    """Ask the Prometheus API from inside h0's namespace (the lab is not reachable from outside)."""
    url = f"http://{address}:9090/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with netns.entered(lab.ns("h0")), urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_for(lab, address, promql, want=bool, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    result: list[dict] = []
    while time.monotonic() < deadline:
        try:
            result = query(lab, address, promql)
        except OSError:  # Prometheus still starting
            result = []
        if want(result):
            return result
        time.sleep(1)
    raise AssertionError(f"{promql}: {result}")


def rule_series() -> set[str]:
    """The names of the agent series the rules read (not rules' own records, not functions, not
    the controller's own metrics: this Prometheus scrapes agents only)."""
    exprs = [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    names = {n for e in exprs for n in re.findall(r"\b(clockfabric_[a-z0-9_]+|up)\b(?![:(])", e)}
    return {n for n in names if not any(f":{n}" in e for e in exprs) and not n.startswith("clockfabric_controller_")}


def test_every_dashboard_query_returns_data(make_lab, tmp_path):
    # two planes: a host whose plane-1 link is down is still scraped over plane 0
    lab = make_lab(multirail(3, 2, 1, 1, host_rate="200mbit"))
    hosts = sorted(lab.topology.hosts)
    addr = {h: str(lab.topology.hosts[h].address) for h in hosts}
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({  # YAML is a superset of JSON
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "clockfabric-agent",
                            "static_configs": [{"targets": [f"{addr[h]}:{METRICS_PORT}" for h in hosts]}]}]}))
    agents = LabAgents(lab, peers=2)
    agents.start()
    argv = ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address={addr['h0']}:9090"]
    with open(tmp_path / "prometheus.log", "w") as log:
        prom = subprocess.Popen(command(lab, "h0", argv), stdout=log, stderr=subprocess.STDOUT)
    lab.register(prom.pid, "prometheus")
    # a job with one flow, h1 -> h0, for the jobs dashboard
    job = [sys.executable, "-m", "clockfabric.cli", "job", "run", "--name", "G", "--", sys.executable, "-c"]
    procs = [lab.spawn("h0", [*job, RECEIVER], "job G receiver", log=tmp_path / "job-receiver.log"),
             lab.spawn("h1", [*job, SENDER, addr["h0"]], "job G sender", log=tmp_path / "job-sender.log")]
    try:
        wait_for(lab, addr["h0"], 'up{job="clockfabric-agent"}',
                 lambda r: len(r) == 3 and all(s["value"][1] == "1" for s in r), timeout_s=60)
        wait_for(lab, addr["h0"], "clockfabric_owd_p50_seconds", timeout_s=60)
        # h2's plane-1 link down until the rules see it (a link down pages from the controller's
        # detector, not from a rule: docs/alerts.md)
        h2_link = lab.topology.find_link("h2", "p1-leaf0")
        impair.set_link(lab, h2_link, up=False)
        try:
            # meanwhile four one-second outages of h1's plane-1 link: flaps and outage lengths to
            # show (eight transitions against the rule's four: increase() over a counter first
            # scraped mid-flap, or a scrape lost on a loaded machine, can miss some)
            impair.flap(lab, lab.topology.find_link("h1", "p1-leaf0"), down_s=1.0, up_s=1.0, count=4)
            down = wait_for(lab, addr["h0"], 'host:clockfabric_links_down:sum{host="h2"} == 1', timeout_s=60)
        finally:
            impair.set_link(lab, h2_link, up=True)
        assert [s["metric"]["host"] for s in down] == ["h2"]
        flaps = wait_for(lab, addr["h0"], 'host_device:clockfabric_link_transitions:increase5m{host="h1"} >= 4')
        assert flaps  # the flapping rule's input crossed its threshold

        empty = []
        for path in DASHBOARDS:
            for title, promql in panel_queries(load(path)):
                try:
                    wait_for(lab, addr["h0"], promql, timeout_s=20)
                except AssertionError:
                    empty.append(f"{path.stem}: {title}: {promql}")
        assert not empty, "panels without data:\n" + "\n".join(empty)
        missing = [n for n in sorted(rule_series()) if not query(lab, addr["h0"], f"count({n})")]
        assert not missing, f"series the rules read that the agents do not export: {missing}"
    finally:
        stop(procs, grace_s=5.0)
        prom.terminate()
        prom.wait(10)
        agents.stop()
        print((tmp_path / "prometheus.log").read_text()[-2000:])
