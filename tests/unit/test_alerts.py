"""AlertManager against a real SQLite file and a real webhook receiver on 127.0.0.1."""

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from clockfabric.controller import alerts
from clockfabric.controller.alerts import AlertManager
from clockfabric.controller.detectors import Finding
from clockfabric.controller.storage.base import StorageError
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.errors import ClockfabricError

S = 1_000_000_000
T0 = 1_790_000_000 * S
FLAP = Finding("flapping:h0:eth0--leaf0:swp1", "flapping", "warning", "link h0:eth0--leaf0:swp1 is flapping",
               {"transitions": 4})
DOWN = Finding("link_down:h2:eth0--leaf1:swp1", "link_down", "critical", "link h2:eth0--leaf1:swp1 is down")


class Receiver:
    """A webhook receiver: keeps the JSON bodies it accepts; answers with `status`."""

    def __init__(self, port: int = 0):
        self.bodies: list[dict] = []
        self.attempts = 0
        self.status = 200
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                receiver.attempts += 1
                if receiver.status == 200:
                    receiver.bodies.append(body)
                self.send_response(receiver.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def actions(self):
        return [(b["action"], b["alert"]["key"]) for b in self.bodies]


def dead_url():
    """A loopback URL where nothing listens (a receiver's port, closed)."""
    r = Receiver()
    r.stop()
    return r.port, r.url


class Flaky:
    """Real storage that fails, while `failing`, as a full disk would."""

    def __init__(self, inner):
        self.inner = inner
        self.failing = False

    def __getattr__(self, name):
        method = getattr(self.inner, name)

        def call(*args, **kwargs):
            if self.failing:
                raise StorageError("SQLite db.sqlite: database or disk is full")
            return method(*args, **kwargs)
        return call


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.stop()


@pytest.fixture
def storage(tmp_path):
    s = SqliteStorage(tmp_path / "db.sqlite")
    yield s
    s.close()


@pytest.fixture
def manager(storage, receiver):
    m = AlertManager(storage, webhook_url=receiver.url, webhook_timeout_s=1.0)
    yield m
    m.close()


def test_same_finding_twice_is_one_alert_and_one_webhook(manager, storage, receiver):
    changes = manager.sync({FLAP.key: FLAP}, T0)
    assert [(a, al.key) for a, al in changes] == [("opened", FLAP.key)]
    assert manager.sync({FLAP.key: FLAP}, T0 + S) == []
    (stored,) = storage.alerts(open_only=True)
    assert (stored.key, stored.kind, stored.severity, stored.opened_ns) == (FLAP.key, "flapping", "warning", T0)
    assert stored.detail == {"transitions": 4}
    assert receiver.actions() == [("opened", FLAP.key)]
    assert receiver.bodies[0]["alert"]["message"] == FLAP.message
    assert manager.webhook_sent == 1


def test_resolve_logs_and_posts_and_closes_in_storage(manager, storage, receiver, caplog):
    caplog.set_level(logging.INFO, logger="clockfabric.controller.alerts")
    manager.sync({FLAP.key: FLAP, DOWN.key: DOWN}, T0)
    changes = manager.sync({DOWN.key: DOWN}, T0 + 5 * S)
    ((action, alert),) = changes
    assert (action, alert.key, alert.resolved_ns) == ("resolved", FLAP.key, T0 + 5 * S)
    assert [a.key for a in storage.alerts(open_only=True)] == [DOWN.key]
    assert receiver.actions()[-1] == ("resolved", FLAP.key)
    assert receiver.bodies[-1]["alert"]["resolved_ns"] == T0 + 5 * S
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith(f"alert opened: {DOWN.key} [critical]") for line in lines)
    assert any(line.startswith(f"alert resolved: {FLAP.key}") for line in lines)
    assert {r.levelno for r in caplog.records if "opened" in r.getMessage()} == {logging.WARNING, logging.ERROR}


def test_a_restarted_manager_neither_reopens_nor_resends(storage, receiver, manager):
    manager.sync({FLAP.key: FLAP, DOWN.key: DOWN}, T0)
    again = AlertManager(storage, webhook_url=receiver.url)
    # still flapping: nothing new; the link came up while the controller was away: resolved
    changes = again.sync({FLAP.key: FLAP}, T0 + 10 * S)
    assert [(a, al.key) for a, al in changes] == [("resolved", DOWN.key)]
    assert len(storage.alerts()) == 2
    assert receiver.actions() == [("opened", FLAP.key), ("opened", DOWN.key), ("resolved", DOWN.key)]
    again.close()


def test_webhook_down_is_retried_at_later_syncs_in_order(storage):
    port, url = dead_url()
    m = AlertManager(storage, webhook_url=url, webhook_timeout_s=1.0)
    m.sync({FLAP.key: FLAP}, T0)
    m.sync({}, T0 + S)
    assert (m.webhook_pending, m.webhook_failures, m.webhook_sent) == (2, 2, 0)  # one try per sync
    assert [a.key for a in storage.alerts()] == [FLAP.key]  # storage did its part regardless
    back = Receiver(port)
    try:
        assert m.sync({}, T0 + 2 * S) == []
        assert back.actions() == [("opened", FLAP.key), ("resolved", FLAP.key)]
        assert (m.webhook_pending, m.webhook_sent) == (0, 2)
    finally:
        back.stop()
        m.close()


def test_webhook_5xx_is_retried_and_4xx_dropped(manager, receiver):
    receiver.status = 503
    manager.sync({FLAP.key: FLAP}, T0)
    assert (manager.webhook_pending, manager.webhook_failures) == (1, 1)
    receiver.status = 400
    manager.sync({FLAP.key: FLAP}, T0 + S)
    assert (manager.webhook_pending, manager.webhook_failures, manager.webhook_dropped) == (0, 2, 1)
    receiver.status = 200
    manager.sync({}, T0 + 2 * S)
    assert receiver.actions() == [("resolved", FLAP.key)]
    assert receiver.attempts == 3


def test_webhook_queue_is_bounded(storage, monkeypatch):
    monkeypatch.setattr(alerts, "WEBHOOK_QUEUE_MAX", 2)
    m = AlertManager(storage, webhook_url=dead_url()[1], webhook_timeout_s=0.5)
    findings = {k: Finding(k, "link_down", "critical", k) for k in ("a", "b", "c")}
    m.sync(findings, T0)
    assert (m.webhook_pending, m.webhook_dropped) == (2, 1)
    m.close()


def test_storage_errors_make_an_in_memory_alert_that_resolves_when_storage_is_back(storage, receiver):
    flaky = Flaky(storage)
    m = AlertManager(flaky, webhook_url=receiver.url, storage_quiet_s=10)
    flaky.failing = True
    changes = m.sync({DOWN.key: DOWN}, T0)
    ((action, alert),) = changes
    assert (action, alert.key, alert.kind, alert.severity) == ("opened", "storage", "storage", "critical")
    assert "disk is full" in alert.message
    assert m.storage_alert == alert and m.storage_failures == 1
    assert receiver.actions() == [("opened", "storage")]
    assert m.sync({DOWN.key: DOWN}, T0 + S) == []  # still failing: no second storage alert
    assert m.storage_alert.detail["failures"] == 2

    flaky.failing = False
    m.storage_wrote(T0 + 4 * S)
    changes = m.sync({DOWN.key: DOWN}, T0 + 5 * S)  # the finding gets its alert; storage's stays, not quiet yet
    assert [(a, al.key) for a, al in changes] == [("opened", DOWN.key)]
    assert m.storage_alert is not None
    changes = m.sync({DOWN.key: DOWN}, T0 + 11 * S)
    assert [(a, al.key) for a, al in changes] == [("resolved", "storage")]
    assert m.storage_alert is None
    history = {a.key: a for a in storage.alerts()}
    assert history["storage"].opened_ns == T0 and history["storage"].resolved_ns == T0 + 11 * S
    assert history[DOWN.key].resolved_ns is None
    assert receiver.actions() == [("opened", "storage"), ("opened", DOWN.key), ("resolved", "storage")]
    m.close()


def test_caller_reports_storage_errors(storage, receiver):
    t = [T0]
    m = AlertManager(storage, webhook_url=receiver.url, clock=lambda: t[0], storage_quiet_s=10)
    alert = m.raise_storage_alert(StorageError("SQLite db.sqlite: database is locked"))
    assert (alert.key, alert.opened_ns) == ("storage", T0)
    assert m.raise_storage_alert(StorageError("again"), T0 + S) is None
    assert receiver.bodies == []  # it goes out with the next sync, never from the caller's thread
    m.storage_wrote(T0 + 2 * S)
    assert [(a, al.key) for a, al in m.sync({}, T0 + 5 * S)] == []  # storage works, but not 10 s quiet yet
    assert receiver.actions() == [("opened", "storage")]
    assert [(a, al.key) for a, al in m.sync({}, T0 + 11 * S)] == [("resolved", "storage")]
    m.close()


def test_the_storage_alert_resolves_only_once_a_push_is_stored(storage, receiver):
    m = AlertManager(storage, webhook_url=receiver.url, storage_quiet_s=10)
    m.raise_storage_alert(StorageError("disk is full"), T0)
    assert m.sync({}, T0 + 60 * S) == []  # storage works for the sync (and the check's probe): not enough
    assert m.storage_alert is not None
    m.storage_wrote(T0 + 61 * S)
    m.raise_storage_alert(StorageError("disk is full"), T0 + 62 * S)  # failing again after that write
    assert m.sync({}, T0 + 80 * S) == [] and m.storage_alert is not None
    m.storage_wrote(T0 + 81 * S)
    assert [(a, al.key) for a, al in m.sync({}, T0 + 82 * S)] == [("resolved", "storage")]
    m.close()


def test_no_webhook_and_bad_webhook_urls(storage):
    m = AlertManager(storage)
    assert [a for a, _ in m.sync({FLAP.key: FLAP}, T0)] == ["opened"]
    assert m.webhook_pending == 0
    for bad in ("ftp://example.org/hook", "http://", "not a url"):
        with pytest.raises(ClockfabricError, match="webhook URL"):
            AlertManager(storage, webhook_url=bad)
