"""AlertManager against a real SQLite file: what opens, resolves and is logged (delivery to
Alertmanager: test_alertmanager.py)."""

import logging

import pytest

from clockfabric.controller.alerts import AlertManager
from clockfabric.controller.detectors import Finding
from clockfabric.controller.storage.base import StorageError
from clockfabric.controller.storage.sqlite import SqliteStorage

S = 1_000_000_000
T0 = 1_790_000_000 * S
FLAP = Finding("flapping:h0:eth0--leaf0:swp1", "flapping", "warning", "link h0:eth0--leaf0:swp1 is flapping",
               {"transitions": 4})
DOWN = Finding("link_down:h2:eth0--leaf1:swp1", "link_down", "critical", "link h2:eth0--leaf1:swp1 is down")


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
def storage(tmp_path):
    s = SqliteStorage(tmp_path / "db.sqlite")
    yield s
    s.close()


@pytest.fixture
def manager(storage):
    m = AlertManager(storage)
    yield m
    m.close()


def test_same_finding_twice_is_one_alert(manager, storage):
    changes = manager.sync({FLAP.key: FLAP}, T0)
    assert [(a, al.key) for a, al in changes] == [("opened", FLAP.key)]
    assert manager.sync({FLAP.key: FLAP}, T0 + S) == []
    (stored,) = storage.alerts(open_only=True)
    assert (stored.key, stored.kind, stored.severity, stored.opened_ns) == (FLAP.key, "flapping", "warning", T0)
    assert (stored.detail, stored.message) == ({"transitions": 4}, FLAP.message)


def test_resolve_logs_and_closes_in_storage(manager, storage, caplog):
    caplog.set_level(logging.INFO, logger="clockfabric.controller.alerts")
    manager.sync({FLAP.key: FLAP, DOWN.key: DOWN}, T0)
    changes = manager.sync({DOWN.key: DOWN}, T0 + 5 * S)
    ((action, alert),) = changes
    assert (action, alert.key, alert.resolved_ns) == ("resolved", FLAP.key, T0 + 5 * S)
    assert [a.key for a in storage.alerts(open_only=True)] == [DOWN.key]
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith(f"alert opened: {DOWN.key} [critical]") for line in lines)
    assert any(line.startswith(f"alert resolved: {FLAP.key}") for line in lines)
    assert {r.levelno for r in caplog.records if "opened" in r.getMessage()} == {logging.WARNING, logging.ERROR}


def test_a_restarted_manager_neither_reopens_nor_resends(storage, manager):
    manager.sync({FLAP.key: FLAP, DOWN.key: DOWN}, T0)
    again = AlertManager(storage)
    # still flapping: nothing new; the link came up while the controller was away: resolved
    changes = again.sync({FLAP.key: FLAP}, T0 + 10 * S)
    assert [(a, al.key) for a, al in changes] == [("resolved", DOWN.key)]
    assert len(storage.alerts()) == 2
    again.close()


def test_storage_errors_make_an_in_memory_alert_that_resolves_when_storage_is_back(storage):
    flaky = Flaky(storage)
    m = AlertManager(flaky, storage_quiet_s=10)
    flaky.failing = True
    changes = m.sync({DOWN.key: DOWN}, T0)
    ((action, alert),) = changes
    assert (action, alert.key, alert.kind, alert.severity) == ("opened", "storage", "storage", "critical")
    assert "disk is full" in alert.message
    assert m.storage_alert == alert and m.storage_failures == 1
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
    m.close()


def test_caller_reports_storage_errors(storage):
    t = [T0]
    m = AlertManager(storage, clock=lambda: t[0], storage_quiet_s=10)
    alert = m.raise_storage_alert(StorageError("SQLite db.sqlite: database is locked"))
    assert (alert.key, alert.opened_ns) == ("storage", T0)
    assert m.raise_storage_alert(StorageError("again"), T0 + S) is None
    m.storage_wrote(T0 + 2 * S)
    assert [(a, al.key) for a, al in m.sync({}, T0 + 5 * S)] == []  # storage works, but not 10 s quiet yet
    assert [(a, al.key) for a, al in m.sync({}, T0 + 11 * S)] == [("resolved", "storage")]
    m.close()


def test_the_storage_alert_resolves_only_once_a_push_is_stored(storage):
    m = AlertManager(storage, storage_quiet_s=10)
    m.raise_storage_alert(StorageError("disk is full"), T0)
    assert m.sync({}, T0 + 60 * S) == []  # storage works for the sync (and the check's probe): not enough
    assert m.storage_alert is not None
    m.storage_wrote(T0 + 61 * S)
    m.raise_storage_alert(StorageError("disk is full"), T0 + 62 * S)  # failing again after that write
    assert m.sync({}, T0 + 80 * S) == [] and m.storage_alert is not None
    m.storage_wrote(T0 + 81 * S)
    assert [(a, al.key) for a, al in m.sync({}, T0 + 82 * S)] == [("resolved", "storage")]
    m.close()
