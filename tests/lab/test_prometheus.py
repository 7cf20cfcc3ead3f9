"""A real Prometheus server scrapes the agents of a lab and answers queries about them.

Prometheus runs inside one lab host's namespace, so its scrapes cross the lab's own
fabric and nothing leaves the lab."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from clockfabric.agent.config import METRICS_PORT
from clockfabric.lab import netns
from clockfabric.lab.agents import LabAgents
from clockfabric.lab.exec import command
from clockfabric.lab.state import Lab
from clockfabric.topology import leafspine

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None,
                                reason="prometheus is not installed (make setup installs it)")


def query(lab: Lab, address: str, promql: str) -> list[dict]:
    """Ask the Prometheus API from inside h0's namespace (the lab is not reachable from outside)."""
    url = f"http://{address}:9090/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with netns.entered(lab.ns("h0")), urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_for(lab, address, promql, want, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    result = []
    while time.monotonic() < deadline:
        try:
            result = query(lab, address, promql)
        except OSError:  # Prometheus still starting
            result = []
        if want(result):
            return result
        time.sleep(1)
    raise AssertionError(f"{promql}: {result}")


def test_prometheus_scrapes_every_agent_and_queries_their_metrics(make_lab, tmp_path):
    lab = make_lab(leafspine(3, 1, 1, host_rate="200mbit"))
    hosts = sorted(lab.topology.hosts)
    addr = {h: str(lab.topology.hosts[h].address) for h in hosts}
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({  # YAML is a superset of JSON
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "clockfabric",
                            "static_configs": [{"targets": [f"{addr[h]}:{METRICS_PORT}" for h in hosts]}]}]}))
    agents = LabAgents(lab, peers=2)
    agents.start()
    argv = ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address={addr['h0']}:9090"]
    with open(tmp_path / "prometheus.log", "w") as log:
        prom = subprocess.Popen(command(lab, "h0", argv), stdout=log, stderr=subprocess.STDOUT)
    lab.register(prom.pid, "prometheus")
    try:
        up = wait_for(lab, addr["h0"], "up", lambda r: len(r) == 3 and all(s["value"][1] == "1" for s in r))
        assert {s["metric"]["instance"] for s in up} == {f"{addr[h]}:{METRICS_PORT}" for h in hosts}
        flaps = wait_for(lab, addr["h0"], 'node_network_carrier_changes_total{host="h1",device="eth0"}',
                         lambda r: len(r) == 1)
        assert float(flaps[0]["value"][1]) >= 1  # the veth came up once at least
        synced = wait_for(lab, addr["h0"], "clockfabric_clock_synced",
                          lambda r: {s["metric"]["host"] for s in r} == set(hosts))
        assert all(s["value"][1] == "1" for s in synced)
        owd = wait_for(lab, addr["h0"], 'clockfabric_owd_p50_seconds{host="h1",direction="out"}', lambda r: r)
        assert all(0 < float(s["value"][1]) < 0.01 for s in owd)  # one-way delays of a lab: µs, not s
    finally:
        prom.terminate()
        prom.wait(10)
        agents.stop()
        print((tmp_path / "prometheus.log").read_text()[-2000:])
