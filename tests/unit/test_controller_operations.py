"""The controller as a service to run, on the real app (FastAPI's test client, real storage): the
readiness probe, its own metrics, storage faults found by the storage check, supervised loops."""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from clockfabric.controller.app import create_app
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.health import StorageWatch
from clockfabric.controller.monitor import Monitor
from clockfabric.controller.storage.base import StorageError
from clockfabric.controller.storage.sqlite import CORRUPT, SqliteStorage, _kind
from clockfabric.controller.supervise import Supervisor
from tests.unit.credentials import as_host
from tests.waiting import wait_for

TOKEN = "t" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HOSTS = ["h0", "h1"]


def app_on(storage, *, tick_s: float = 3600, check_s: float = 0.05):
    monitor = Monitor.create(storage)
    monitor.alerts.storage_quiet_ns = 0  # resolve the storage alert at the first tick after recovery
    fleet = Fleet(storage, hosts=HOSTS, stale_s=60, monitor=monitor)
    return fleet, TestClient(create_app(fleet, TOKEN, tick_s=tick_s, check_s=check_s))


@pytest.fixture
def env(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db", busy_timeout_s=0.2, quick_check_s=0)
    fleet, client = app_on(storage)
    with client:
        wait_for("the first storage check", lambda: client.get("/readyz").status_code == 200, timeout_s=5)
        yield client, fleet, tmp_path / "c.db"
    storage.close()


def push(client, host="h0", seq=1):
    return client.post("/api/v1/push", headers=as_host(TOKEN, host), json={
        "host": host, "boot": "b1", "events": [{"seq": seq, "t_ns": 1, "kind": "agent_start"}]})


def metrics(client) -> dict[tuple[str, tuple], float]:
    r = client.get("/metrics", headers=AUTH)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def failing(client, what: str) -> dict:
    def check():
        r = client.get("/readyz")
        return r.status_code == 503 and what in str(r.json()["failing"]) and r.json()
    return wait_for(f"/readyz to fail with {what}", check, timeout_s=10)


# ---- readiness and metrics ----------------------------------------------------------------------------
def test_readyz_and_healthz_need_no_token_and_metrics_does(env):
    client, *_ = env
    assert client.get("/healthz").json() == {"ok": True}
    assert client.get("/readyz").json() == {"ready": True}
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_metrics_count_pushes_by_outcome_and_time_them(env):
    client, fleet, _ = env
    assert push(client).status_code == 200 and push(client, seq=2).status_code == 200
    assert push(client, host="intruder").status_code == 403
    assert client.post("/api/v1/push", headers=as_host(TOKEN, "h0"), json={"host": "h0"}).status_code == 422
    assert client.post("/api/v1/push", json={"host": "h0", "boot": "b"}).status_code == 401
    fleet.tick()  # the detectors run
    m = metrics(client)
    p = "clockfabric_controller_"
    assert m[(p + "pushes_received_total", ())] == 5
    assert m[(p + "pushes_stored_total", ())] == 2
    for reason in ("unknown_host", "invalid", "unauthorised"):
        assert m[(p + "pushes_refused_total", (("reason", reason),))] == 1
    assert m[(p + "push_duration_seconds_count", ())] == 5
    runs = {dict(k[1])["detector"]: v for k, v in m.items() if k[0] == p + "detector_duration_seconds_count"}
    assert runs and set(runs) <= set(fleet.monitor.detectors.detectors) and all(n == 1 for n in runs.values())
    assert m[(p + "ready", ())] == 1
    assert m[(p + "alerts_open", (("kind", "storage"),))] == 0
    assert m[(p + "database_size_bytes", ())] > 0


def test_open_alerts_are_counted_by_kind(env):
    client, fleet, _ = env
    push(client, host="h1")
    later = fleet.clock() + 120 * 10**9  # h1 went quiet, past --stale
    fleet.clock = lambda: later
    fleet.tick()
    assert metrics(client)[("clockfabric_controller_alerts_open", (("kind", "host_stale"),))] == 1


# ---- storage faults ------------------------------------------------------------------------------------
def test_a_deleted_database_is_alerted_refused_and_not_ready(env):
    client, fleet, path = env
    assert push(client).status_code == 200
    for name in (path, path.with_name("c.db-wal"), path.with_name("c.db-shm")):
        name.unlink(missing_ok=True)
    assert failing(client, "deleted")["failing"]["storage"] == "failing: deleted"
    r = push(client, seq=2)
    assert r.status_code == 503 and r.headers["Retry-After"] == "1" and "deleted" in r.json()["detail"]
    assert not path.exists()  # the write was refused, not made into a new empty file
    (alert,) = client.get("/api/v1/alerts", headers=AUTH).json()["items"]
    assert alert["key"] == "storage" and alert["id"] is None and alert["detail"]["fault"] == "deleted"
    m = metrics(client)
    assert m[("clockfabric_controller_storage_faults_total", (("kind", "deleted"),))] == 1
    assert m[("clockfabric_controller_storage_errors_total", (("kind", "deleted"),))] >= 2
    assert m[("clockfabric_controller_alerts_open", (("kind", "storage"),))] == 1
    assert m[("clockfabric_controller_ready", ())] == 0


def test_a_replaced_database_is_refused_until_put_back_then_the_alert_is_stored(env):
    client, fleet, path = env
    assert push(client).status_code == 200
    moved = path.with_name("moved.db")
    stranger = path.with_name("other.db")
    SqliteStorage(stranger).close()  # another database, made elsewhere, copied over ours
    before = stranger.read_bytes()
    os.replace(path, moved)
    shutil.copy(stranger, path)
    failing(client, "replaced")
    assert push(client, seq=2).status_code == 503
    assert client.get("/api/v1/events", headers=AUTH).status_code == 503  # reads, too: not from the stranger
    assert path.read_bytes() == before  # nothing went into it
    os.replace(moved, path)  # put back: the file the controller has open
    # the check passes again, but a push was refused since the last one stored: not ready until one is
    wait_for("only the refused write keeps it unready", lambda: client.get("/readyz").json().get("failing")
             == {"writes": "refused: replaced"}, timeout_s=10)
    assert push(client, seq=2).status_code == 200
    assert client.get("/readyz").json() == {"ready": True}
    fleet.tick()  # storage works: the storage alert is written to storage, resolved
    (stored,) = [a for a in client.get("/api/v1/alerts", headers=AUTH).json()["items"] if a["key"] == "storage"]
    assert stored["id"] is not None and stored["resolved_ns"] is not None and stored["detail"]["fault"] == "replaced"
    assert [e["seq"] for e in client.get("/api/v1/events", headers=AUTH).json()["items"]] == [1, 2]


def test_overwritten_pages_are_found_by_the_check_and_writes_refused(env):
    client, fleet, path = env
    for i in range(1, 400):
        assert push(client, seq=i).status_code == 200
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    page = 4096
    with open(path, "r+b") as f:  # every page but the first (the header), garbage
        size = f.seek(0, os.SEEK_END)
        f.seek(page)
        f.write(bytes([0xA5]) * (size - page))
    failing(client, "corrupt")
    assert push(client, seq=1000).status_code == 503
    (alert,) = client.get("/api/v1/alerts", headers=AUTH, params={"open_only": True}).json()["items"][:1]
    assert alert["key"] == "storage" and alert["detail"]["fault"] == "corrupt"
    assert metrics(client)[("clockfabric_controller_storage_faults_total", (("kind", "corrupt"),))] == 1


def test_sqlite_corruption_met_by_a_query_is_a_storage_error_not_a_crash(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db", quick_check_s=3600)

    def unknown(*_a, **_k):
        raise sqlite3.DatabaseError("something SQLite never says")

    with storage._errors(), pytest.raises(sqlite3.DatabaseError):  # unclassified: stays what it is
        unknown()
    err = sqlite3.DatabaseError("database disk image is malformed")
    err.sqlite_errorcode = CORRUPT  # type: ignore[attr-defined]
    with pytest.raises(StorageError) as caught, storage._errors():
        raise err
    assert caught.value.kind == "corrupt"
    storage.close()


def test_sqlite_errors_are_known_by_kind_on_every_python(tmp_path):
    # from Python 3.11 on by their result code; before it by SQLite's message
    def kind(act) -> str | None:
        with pytest.raises(sqlite3.Error) as caught:
            act()
        return _kind(caught.value)

    path = str(tmp_path / "k.db")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    assert kind(lambda: sqlite3.connect(path, isolation_level=None, timeout=0).execute("BEGIN IMMEDIATE")) == "busy"
    holder.execute("COMMIT")
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    assert kind(lambda: reader.execute("INSERT INTO t VALUES (1)")) == "readonly"
    assert kind(lambda: reader.execute("SELECT y FROM t")) is None  # a query's own mistake
    assert kind(lambda: sqlite3.connect(f"file:{tmp_path}/no/such.db?mode=rw", uri=True)) == "cantopen"
    (tmp_path / "text.db").write_text("not a database, " * 100)
    assert kind(lambda: sqlite3.connect(tmp_path / "text.db").execute("SELECT * FROM sqlite_master")) == "corrupt"
    for db in (holder, reader):
        db.close()


def test_postgres_gone_is_found_and_pushes_get_503():
    from tests.pg import missing, throwaway_postgres

    if missing():
        pytest.skip(missing())
    from clockfabric.controller.storage.postgres import PostgresStorage

    server_cm = throwaway_postgres(fsync=False)
    server = server_cm.__enter__()
    try:
        storage = PostgresStorage(server.create_database("ops"))
        fleet, client = app_on(storage)
        with client:
            wait_for("ready", lambda: client.get("/readyz").status_code == 200, timeout_s=5)
            assert push(client).status_code == 200
            assert metrics(client)[("clockfabric_controller_database_size_bytes", ())] > 0
            server_cm.__exit__(None, None, None)  # the server stops
            server_cm = None
            assert failing(client, "unreachable")
            assert push(client, seq=2).status_code == 503
            (alert,) = client.get("/api/v1/alerts", headers=AUTH).json()["items"]  # storage unread: ours alone
            assert alert["key"] == "storage" and alert["detail"]["fault"] == "unreachable"
        storage.close()
    finally:
        if server_cm is not None:
            server_cm.__exit__(None, None, None)


def test_each_storage_fault_in_a_row_is_shown_by_the_api_within_10_s(tmp_path):
    """Faults closer together than the alert's quiet spell (a lock, then deletions, as the chaos soak
    injects them): each one, not only the first, is the fault the API's open storage alert names."""
    path = tmp_path / "c.db"
    storage = SqliteStorage(path, busy_timeout_s=0.2, quick_check_s=3600)
    fleet, client = app_on(storage)
    fleet.monitor.alerts.storage_quiet_ns = 3600 * 10**9  # the alert stays open across every fault below

    def shown(fault: str) -> bool:
        items = client.get("/api/v1/alerts", headers=AUTH, params={"open_only": True}).json()["items"]
        return any(a["key"] == "storage" and a["detail"]["fault"] == fault for a in items)

    def ready() -> bool:
        return client.get("/readyz").status_code == 200

    with client:
        wait_for("the first storage check", ready, timeout_s=5)
        lock = sqlite3.connect(path, isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")
        wait_for("the lock alerted", lambda: shown("busy"), timeout_s=10)
        lock.execute("ROLLBACK")
        lock.close()
        wait_for("ready after the lock", ready, timeout_s=10)
        away = path.with_name("c.db.away")
        for _ in range(3):
            os.rename(path, away)
            wait_for("the deletion alerted", lambda: shown("deleted"), timeout_s=10)
            os.rename(away, path)
            wait_for("ready after the deletion", ready, timeout_s=10)
        (alert,) = [a for a in client.get("/api/v1/alerts", headers=AUTH).json()["items"] if a["key"] == "storage"]
        assert alert["detail"]["faults"] == ["busy", "deleted"]  # one alert, open all along: each kind once
    storage.close()


def test_a_lock_is_found_and_shown_while_writes_queue_behind_it(env):
    """Another process holds the write lock and the controller's writer waits on it (as each push does,
    for the busy timeout, one after another): the check still finds the lock, and the API still shows it."""
    client, fleet, path = env
    fleet.monitor.alerts.storage_quiet_ns = 3600 * 10**9
    lock = sqlite3.connect(path, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    answers: list = []
    with fleet.storage._lock:  # the writer's turn, held by a stuck write
        assert failing(client, "busy")["failing"]["storage"] == "failing: busy"
        reader = threading.Thread(target=lambda: answers.append(client.get(
            "/api/v1/alerts", headers=AUTH, params={"open_only": True})), daemon=True)
        reader.start()
        reader.join(10)
        assert answers, "the alerts route waited behind the stuck write"
        assert [(a["key"], a["detail"]["fault"]) for a in answers[0].json()["items"]] == [("storage", "busy")]
        lock.execute("ROLLBACK")
    lock.close()
    wait_for("ready again", lambda: client.get("/readyz").status_code == 200, timeout_s=10)


def test_storage_watch_counts_a_fault_once_while_it_lasts(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db", quick_check_s=3600)
    reported = []
    watch = StorageWatch(storage, report=lambda e, now: reported.append(e.kind), every_s=0.1)
    assert watch.healthy() == "not checked yet"
    watch.check()
    assert watch.healthy() is None and watch.size_bytes
    (tmp_path / "c.db").unlink()
    watch.check()
    watch.check()
    assert watch.healthy() == "failing: deleted" and dict(watch.faults) == {"deleted": 1}
    assert reported == ["deleted", "deleted"]  # each failed check reaches the alert manager
    storage.close()


# ---- supervised loops ----------------------------------------------------------------------------------
def test_a_tick_that_raises_is_restarted_and_readiness_recovers(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    fleet, client = app_on(storage, tick_s=0.05)
    broken = threading.Event()
    real_tick = fleet.tick

    def tick():
        if broken.is_set():
            broken.clear()
            raise RuntimeError("a bug in the tick")
        real_tick()

    fleet.tick = tick
    with client:
        ops = client.app.state.operations
        ops.supervisor.loops["tick"].step = tick
        wait_for("ready", lambda: client.get("/readyz").status_code == 200, timeout_s=5)
        broken.set()
        assert "tick" in failing(client, "threads")["failing"]["threads"]
        wait_for("ready again", lambda: client.get("/readyz").status_code == 200, timeout_s=10)
        assert ops.supervisor.restarts()["tick"] == 1
        assert metrics(client)[("clockfabric_controller_thread_restarts_total", (("thread", "tick"),))] == 1
    storage.close()


def test_the_supervisor_backs_off_and_resets_after_a_good_step():
    calls = []
    fail = [True, True, False]

    def step():
        calls.append(1)
        if fail and fail.pop(0):
            raise ValueError("boom")

    sup = Supervisor(backoff_s=0.05, max_backoff_s=1.0, watch_s=0.01)
    sup.add("x", step, 0.01, at_start=True)
    sup.start()
    try:
        wait_for("two restarts and a good step", lambda: sup.restarts()["x"] == 2 and len(calls) >= 4, timeout_s=5)
        loop = sup.loops["x"]
        assert loop.failures == 2 and "boom" in loop.last_error
        assert loop.backoff_s == 0.05  # back to the first backoff after a step went through
        assert sup.dead() == []
    finally:
        sup.stop()
    assert sup.dead() == ["x"]


# ---- readiness follows the pushes' writes, not only the check's probe ---------------------------------
class PushesFail(SqliteStorage):
    """Storage whose pushes fail on demand while its check (a probe row) still passes."""
    failing = False

    def add_push(self, *args, **kwargs):
        if self.failing:
            raise StorageError("disk is full", kind="full")
        return super().add_push(*args, **kwargs)


def test_a_refused_push_makes_it_unready_until_a_push_is_stored_and_only_that_resolves_the_alert(tmp_path):
    storage = PushesFail(tmp_path / "c.db", busy_timeout_s=0.2, quick_check_s=0)
    fleet, client = app_on(storage)
    with client:
        wait_for("the first storage check", lambda: client.get("/readyz").status_code == 200, timeout_s=5)
        assert push(client).status_code == 200
        storage.failing = True
        assert push(client, seq=2).status_code == 503
        r = client.get("/readyz")  # at once, from the refusal: the check's probe still passes
        assert r.status_code == 503 and r.json()["failing"] == {"writes": "refused: full"}
        storage.failing = False
        storage.check(fleet.clock())  # the probe alone: still unready, the alert still open
        fleet.tick()
        assert client.get("/readyz").status_code == 503
        assert fleet.monitor.alerts.storage_alert is not None
        assert push(client, seq=2).status_code == 200
        assert client.get("/readyz").json() == {"ready": True}
        fleet.tick()
        assert fleet.monitor.alerts.storage_alert is None
        (stored,) = [a for a in client.get("/api/v1/alerts", headers=AUTH).json()["items"] if a["key"] == "storage"]
        assert stored["resolved_ns"] is not None and stored["detail"]["fault"] == "full"
    storage.close()
