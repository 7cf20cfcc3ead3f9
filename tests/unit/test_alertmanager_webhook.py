"""`--alert-webhook`: alerts in Alertmanager's webhook format (version 4), posted from their own
thread with bounded retries. The real AlertManager on a real SQLite file, posting to a real HTTP
receiver on loopback."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from clockfabric.controller.alertmanager import NEVER, AlertmanagerWebhook, fingerprint, payload
from clockfabric.controller.alerts import AlertManager
from clockfabric.controller.app import create_app
from clockfabric.controller.detectors import Finding
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.monitor import Monitor
from clockfabric.controller.storage.base import Alert
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.errors import ClockfabricError
from tests.unit.cli_flags import accepted_options

S = 1_000_000_000
T0 = 1_790_000_000 * S
DOWN = Finding("link_down:h2:eth0--leaf1:swp1", "link_down", "critical", "link h2:eth0--leaf1:swp1 is down",
               {"host": "h2", "device": "eth0", "transitions": 3})


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - the handler's name
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        srv = self.server
        time.sleep(srv.delay_s)
        status = srv.answers.pop(0) if srv.answers else 200
        srv.tries += 1
        if status == 200:
            srv.bodies.append(body)
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *_args):
        pass


@pytest.fixture
def receiver():
    """An Alertmanager webhook receiver: `answers` are the statuses it gives first (then 200)."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.bodies, srv.answers, srv.tries, srv.delay_s = [], [], 0, 0.0
    srv.url = f"http://127.0.0.1:{srv.server_port}/alerts"
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()


@pytest.fixture
def storage(tmp_path):
    s = SqliteStorage(tmp_path / "c.db")
    yield s
    s.close()


def wait_for(what: str, check, timeout_s: float = 5.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_an_alert_fires_and_resolves_in_alertmanagers_format(receiver, storage):
    hook = AlertmanagerWebhook(receiver.url, external_url="http://controller:7400")
    manager = AlertManager(storage, alertmanager=hook)
    manager.sync({DOWN.key: DOWN}, T0)
    manager.sync({}, T0 + 90 * S)
    wait_for("two posts", lambda: len(receiver.bodies) == 2)
    manager.close()
    firing, resolved = receiver.bodies
    assert firing["version"] == "4" and firing["status"] == "firing" and resolved["status"] == "resolved"
    assert firing["receiver"] == "clockfabric" and firing["externalURL"] == "http://controller:7400"
    assert firing["truncatedAlerts"] == 0
    (alert,) = firing["alerts"]
    assert alert["labels"] == {"alertname": "ClockfabricLinkDown", "severity": "critical", "key": DOWN.key,
                               "host": "h2", "device": "eth0"}
    assert alert["annotations"] == {"summary": DOWN.message} and alert["status"] == "firing"
    assert alert["startsAt"] == "2026-09-21T14:13:20.000000Z" and alert["endsAt"] == NEVER
    (done,) = resolved["alerts"]
    assert done["endsAt"] == "2026-09-21T14:14:50.000000Z" and done["startsAt"] == alert["startsAt"]
    # a receiver pairs the resolve with its firing: one group, one fingerprint
    assert firing["groupKey"] == resolved["groupKey"] == (
        '{}:{alertname="ClockfabricLinkDown", key="link_down:h2:eth0--leaf1:swp1"}')
    assert alert["fingerprint"] == done["fingerprint"] == fingerprint(alert["labels"])
    assert firing["commonLabels"] == alert["labels"] and firing["groupLabels"] == {
        "alertname": "ClockfabricLinkDown", "key": DOWN.key}
    assert (hook.sent, hook.failures, hook.dropped, hook.pending) == (2, 0, 0, 0)


def test_the_fingerprint_is_alertmanagers():
    # prometheus/common model: the empty label set, and a signature from its own tests
    assert int(fingerprint({}), 16) == 14695981039346656037
    assert int(fingerprint({"name": "garland, briggs", "fear": "love is not enough"}), 16) == 5799056148416392346


def test_a_slow_receiver_never_holds_up_the_tick(receiver, storage):
    receiver.delay_s = 1.0
    hook = AlertmanagerWebhook(receiver.url)
    manager = AlertManager(storage, alertmanager=hook)
    t = time.monotonic()
    manager.sync({DOWN.key: DOWN}, T0)
    manager.sync({}, T0 + S)
    assert time.monotonic() - t < 0.5  # two posts of 1 s each are still ahead
    wait_for("both posts", lambda: len(receiver.bodies) == 2, timeout_s=5)
    manager.close()


def test_a_receiver_that_fails_for_a_while_gets_it_on_a_retry(receiver, storage):
    receiver.answers = [503, 502]
    hook = AlertmanagerWebhook(receiver.url, first_wait_s=0.05)
    hook.send("opened", Alert(key="k", kind="link_down", severity="critical", message="m", opened_ns=T0))
    wait_for("the post", lambda: receiver.bodies)
    hook.close()
    assert (receiver.tries, hook.sent, hook.failures, hook.dropped) == (3, 1, 2, 0)


def test_retries_are_bounded_and_a_refusal_is_not_retried(receiver, storage):
    receiver.answers = [503] * 10 + [400]
    hook = AlertmanagerWebhook(receiver.url, attempts=3, first_wait_s=0.02)
    alert = Alert(key="k", kind="flapping", severity="warning", message="m", opened_ns=T0)
    hook.send("opened", alert)
    wait_for("three tries", lambda: hook.dropped == 1)
    assert receiver.tries == 3 and hook.failures == 3 and not receiver.bodies  # given up after 3, not 10
    receiver.answers = [400]
    hook.send("resolved", alert)
    wait_for("the refusal", lambda: hook.dropped == 2)
    assert receiver.tries == 4  # a 4xx is refused for good: one try
    hook.close()


def test_a_full_queue_drops_the_oldest(receiver, monkeypatch):
    monkeypatch.setattr("clockfabric.controller.alertmanager.QUEUE_MAX", 3)
    receiver.delay_s = 0.3
    hook = AlertmanagerWebhook(receiver.url)
    for i in range(6):  # the first is taken by the thread at once; 3 wait; 2 are pushed out
        hook.send("opened", Alert(key=f"k{i}", kind="link_down", severity="critical", message="m", opened_ns=T0))
    assert hook.dropped >= 2 and hook.pending <= 3
    wait_for("the queue to drain", lambda: hook.pending == 0 and len(receiver.bodies) + hook.dropped == 6)
    hook.close()
    assert [b["alerts"][0]["labels"]["key"] for b in receiver.bodies][-1] == "k5"  # the newest always goes


def test_a_bad_url_is_one_clear_line():
    with pytest.raises(ClockfabricError, match="--alert-webhook 'alertmanager:9093' is not an http"):
        AlertmanagerWebhook("alertmanager:9093")


def test_detail_values_that_are_not_names_are_not_labels():
    alert = Alert(key="k", kind="latency_sla", severity="warning", message="m", opened_ns=T0,
                  detail={"src": "h0", "dst": "h1", "path": 3, "host": True, "device": {"x": 1}})
    labels = payload("opened", alert)["alerts"][0]["labels"]
    assert labels == {"alertname": "ClockfabricLatencySla", "severity": "warning", "key": "k",
                      "src": "h0", "dst": "h1", "path": "3"}


def test_the_controller_counts_its_posts_in_its_metrics(receiver, storage):
    token = "t" * 32
    monitor = Monitor.create(storage, alert_webhook=receiver.url)
    client = TestClient(create_app(Fleet(storage, hosts=["h0"], monitor=monitor), token, tick_s=3600))
    with client:
        monitor.alerts.sync({DOWN.key: DOWN}, T0)
        wait_for("the post", lambda: receiver.bodies)
        text = client.get("/metrics", headers={"Authorization": f"Bearer {token}"}).text
    got = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert got["clockfabric_controller_alertmanager_webhook_sent_total"] == 1
    assert got["clockfabric_controller_alertmanager_webhook_pending"] == 0
    assert "clockfabric_controller_webhook_sent_total" not in got  # no --webhook given


def test_the_controller_takes_alert_webhook():
    assert {"--alert-webhook", "--webhook"} <= accepted_options("controller")
