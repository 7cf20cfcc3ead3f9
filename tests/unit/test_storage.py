"""Controller storage: one suite run against SQLite and against a real, throwaway PostgreSQL server."""

from __future__ import annotations

import math
import os
import sqlite3
import subprocess
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import replace

import pytest

from clockfabric.controller.storage import open_storage
from clockfabric.controller.storage.base import Alert, Audit, Event, StorageError
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.errors import ClockfabricError


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request, tmp_path):
    """Opens a storage on one fresh database, as often as asked (a reopen sees the same data)."""
    if request.param == "sqlite":
        target = str(tmp_path / "controller.db")
    else:
        target = request.getfixturevalue("postgres_server").create_database(f"t_{uuid.uuid4().hex[:12]}")
    opened = []

    def open_():
        opened.append(open_storage(target))
        return opened[-1]

    yield open_
    for s in opened:
        s.close()


@pytest.fixture
def store(opener):
    return opener()


def ev(host: str, seq: int, t_ns: int, kind: str = "link_down", boot: str = "b1", **kw) -> Event:
    return Event(host=host, seq=seq, boot=boot, t_ns=t_ns, kind=kind, **kw)


def alert(key: str, opened_ns: int, **kw) -> Alert:
    return Alert(key=key, kind="flapping", severity="warning", message=f"{key} flaps", opened_ns=opened_ns, **kw)


def audit(t_ns: int, verdict: str = "pass", exit_code: int = 0, fleet: str = "lab demo") -> Audit:
    counts = {"pass": 3, "skip": 1, "warn": 0, "unknown": 0, "fail": 0}
    finding = {"host": "h2", "evidence": {"mem_gib": 23.5, "dimms": None}}
    report = {"fleet": fleet, "hosts": ["h1", "h2"], "verdict": verdict, "exit_code": exit_code, "started_ns": t_ns,
              "counts": counts, "checks": [{"id": "configuration.memory", "verdict": verdict, "findings": [finding]}]}
    return Audit(t_ns=t_ns, fleet=fleet, verdict=verdict, exit_code=exit_code, counts=counts, report=report)


# ---- hosts -------------------------------------------------------------------------------------------
def test_enroll_hosts_and_seen(store):
    assert store.hosts() == [] and store.host("h1") is None
    store.enroll("h2", 100)
    store.enroll("h1", 200)
    store.enroll("h1", 300)  # again: the first enrolment stands
    assert [(h.name, h.enrolled_ns, h.last_seen_ns) for h in store.hosts()] == [("h1", 200, None), ("h2", 100, None)]
    store.seen("h1", 400, {"version": "0.1.0", "nics": ["eth0", "eth1"]})
    store.seen("h1", 500, {"version": "0.2.0"})
    h1 = store.host("h1")
    assert (h1.enrolled_ns, h1.last_seen_ns, h1.info) == (200, 500, {"version": "0.2.0"})
    store.seen("h3", 600, {})  # seen before enrolled: enrolled now
    assert store.host("h3").enrolled_ns == 600


# ---- events ------------------------------------------------------------------------------------------
def test_hosts_held_for_approval(store):
    assert store.hold("gpu-7", 5, {"address": "10.0.0.7", "neighbours": {"eth0": "leaf0:swp7"}}) == "pending"
    assert store.hold("gpu-7", 9, {"address": "10.0.0.7", "neighbours": {}}) == "pending"
    assert store.hold("gpu-8", 6, {}) == "pending"
    held = store.held()
    assert [(h.name, h.state, h.first_seen_ns, h.last_seen_ns, h.info) for h in held] == [
        ("gpu-7", "pending", 5, 9, {"address": "10.0.0.7", "neighbours": {}}), ("gpu-8", "pending", 6, 6, {})]
    assert store.host("gpu-7") is None
    assert store.held_host("gpu-8") == held[1] and store.held_host("nobody") is None
    assert store.reject("gpu-8") and not store.reject("nobody")
    assert store.hold("gpu-8", 10, {"address": "10.0.0.8"}) == "rejected"
    assert [(h.state, h.info) for h in store.held() if h.name == "gpu-8"] == [("rejected", {})]
    assert store.approve("gpu-7", 11) and not store.approve("gpu-7", 12)
    assert store.host("gpu-7").enrolled_ns == 11 and [h.name for h in store.held()] == ["gpu-8"]
    assert store.approve("gpu-8", 13) and store.held() == []


def test_revoked_hosts_epochs_rise_and_outlive_a_reopen(opener):
    store = opener()
    assert store.epochs() == {}
    assert [store.revoke("gpu-7"), store.revoke("gpu-8"), store.revoke("gpu-7")] == [1, 1, 2]
    assert opener().epochs() == {"gpu-7": 2, "gpu-8": 1}


def test_events_round_trip(store):
    e = ev("h1", 1, 10, device="eth0", detail={"carrier_changes": 7, "rtt": math.inf}, synced=False)
    assert store.add_events([e]) == 1
    (got,) = store.events()
    assert got.id is not None and got == Event(**{**e.__dict__, "id": got.id})


def test_events_stored_once_when_re_sent(store):
    push = [ev("h1", seq, 100 + seq) for seq in range(5)]
    assert store.add_events(push) == 5
    assert store.add_events(push + [ev("h1", 5, 105)]) == 1  # the agent re-sent a push it thought lost
    assert store.add_events([ev("h1", 0, 200, boot="b2")]) == 1  # a new agent run numbers from 0 again
    assert store.add_events([ev("h2", 0, 300)]) == 1
    assert store.add_events([]) == 0
    assert [(e.host, e.boot, e.seq) for e in store.events()] == (
        [("h1", "b1", s) for s in range(6)] + [("h1", "b2", 0), ("h2", "b1", 0)])


def test_events_paged_by_id(store):
    store.add_events([ev(f"h{i % 3}", i, 1000 + i) for i in range(25)])
    pages, after = [], 0
    while page := store.events(after_id=after, limit=10):
        pages.append(page)
        after = page[-1].id
    assert [len(p) for p in pages] == [10, 10, 5]
    ids = [e.id for p in pages for e in p]
    assert ids == sorted(set(ids))
    assert [e.seq for p in pages for e in p] == list(range(25))


def test_event_filters(store):
    store.add_events([ev("h1", 0, 100, "link_down"), ev("h1", 1, 200, "link_up"), ev("h2", 0, 150, "link_down"),
                      ev("h2", 1, 250, "agent_start"), ev("h3", 0, 300, "link_down")])

    def seqs(**kw):
        return [(e.host, e.seq) for e in store.events(**kw)]

    assert seqs(since_ns=150, until_ns=250) == [("h1", 1), ("h2", 0)]  # since inclusive, until exclusive
    assert seqs(host="h2") == [("h2", 0), ("h2", 1)]
    assert seqs(kind="link_down") == [("h1", 0), ("h2", 0), ("h3", 0)]
    assert seqs(kind="link_down", host="h3", since_ns=300) == [("h3", 0)]
    assert seqs(kind="link_down", since_ns=101, limit=1) == [("h2", 0)]
    assert seqs(host="nobody") == []


def test_a_push_is_one_transaction(store):
    store.enroll("h1", 1)
    assert store.add_push("h1", 50, {"pid": 7}, [ev("h1", 1, 10)]) == 1
    assert store.host("h1").info == {"pid": 7}
    with pytest.raises(Exception):  # noqa: B017 - each driver has its own: the point is what is left after
        store.add_push("h1", 60, {"pid": 8}, [ev("h1", 2, 20), ev("h1", 3, 2**70)])
    assert [e.seq for e in store.events()] == [1]  # nothing of the failed push
    assert store.host("h1").last_seen_ns == 50 and store.host("h1").info == {"pid": 7}


def test_concurrent_writers_from_threads(store):
    def push(host: str) -> None:
        for t in range(20):
            store.add_push(host, t, {"t": t}, [ev(host, 1000 + t, t)])
            store.add_events([ev(host, t, t)])

    threads = [threading.Thread(target=push, args=(f"h{i}",)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(store.events(limit=1000)) == 4 * 20 * 2
    assert {store.host(f"h{i}").info["t"] for i in range(4)} == {19}


# ---- alerts ------------------------------------------------------------------------------------------
def test_alerts_de_duplicated_resolved_and_reopened(store):
    first = store.open_alert(alert("flapping:leaf0-spine1", 100, detail={"flaps": 5}))
    assert first is not None and first.id is not None and first.detail == {"flaps": 5}
    assert store.open_alert(alert("flapping:leaf0-spine1", 110)) is None  # one open alert per key
    assert store.open_alert(alert("flapping:leaf1-spine0", 120)) is not None
    closed = store.resolve_alert("flapping:leaf0-spine1", 200)
    assert closed == Alert(**{**first.__dict__, "resolved_ns": 200})
    assert store.resolve_alert("flapping:leaf0-spine1", 210) is None  # nothing open any more
    assert store.resolve_alert("never", 210) is None
    again = store.open_alert(alert("flapping:leaf0-spine1", 300))
    assert again is not None and again.id > first.id
    assert [(a.key, a.opened_ns) for a in store.alerts(open_only=True)] == [
        ("flapping:leaf1-spine0", 120), ("flapping:leaf0-spine1", 300)]
    with pytest.raises(ValueError):
        store.open_alert(alert("x", 1, resolved_ns=2))


def test_alerts_window_and_paging(store):
    for key, opened, resolved in [("a", 100, 200), ("b", 150, None), ("c", 300, 400), ("d", 500, None)]:
        store.open_alert(alert(key, opened))
        if resolved:
            store.resolve_alert(key, resolved)

    def keys(**kw):
        return [a.key for a in store.alerts(**kw)]

    assert keys() == ["a", "b", "c", "d"]
    assert keys(since_ns=250, until_ns=450) == ["b", "c"]  # open at any time in the window
    assert keys(since_ns=200) == ["a", "b", "c", "d"]  # "a" was still open at 200
    assert keys(until_ns=150) == ["a"]
    assert keys(open_only=True, since_ns=600) == ["b", "d"]
    page = store.alerts(limit=2)
    assert [a.key for a in page] == ["a", "b"] and keys(after_id=page[-1].id) == ["c", "d"]


# ---- audits ------------------------------------------------------------------------------------------
def test_audits_round_trip_and_summaries(store):
    first = store.add_audit(audit(100))
    second = store.add_audit(audit(200, "fail", 2, fleet="fleet.yaml"))
    assert first.id is not None and second.id > first.id
    assert store.audit(second.id) == second  # the report comes back whole
    assert list(store.audit(second.id).report) == list(second.report)  # in its own key order
    assert store.audit(second.id + 1) is None
    listed = store.audits()
    assert listed == [replace(first, report=None), replace(second, report=None)]  # summaries: no report
    with pytest.raises(ValueError, match="report"):
        store.add_audit(replace(first, report=None, id=None))


def test_audits_window_and_paging(store):
    ids = [store.add_audit(audit(t)).id for t in (100, 300, 200, 400, 500)]

    def times(**kw):
        return [a.t_ns for a in store.audits(**kw)]

    assert times() == [100, 300, 200, 400, 500]  # in the order stored
    assert times(since_ns=200, until_ns=400) == [300, 200]  # since inclusive, until exclusive
    assert times(since_ns=450) == [500] and times(until_ns=100) == []
    page = store.audits(limit=2)
    assert [a.id for a in page] == ids[:2] and times(after_id=page[-1].id, limit=2) == [200, 400]
    assert times(after_id=ids[-1]) == []


# ---- opening -----------------------------------------------------------------------------------------
def test_reopen_keeps_everything(opener):
    s = opener()
    s.enroll("h1", 1)
    s.add_events([ev("h1", 0, 10)])
    s.open_alert(alert("k", 10))
    s.close()
    again = opener()
    assert again.host("h1") is not None and len(again.events()) == 1
    assert again.open_alert(alert("k", 20)) is None
    assert again.add_events([ev("h1", 0, 10)]) == 0


def test_database_from_before_audits_opens_and_gains_them(opener):
    s = opener()
    s.enroll("h1", 1)
    s.add_events([ev("h1", 0, 10)])
    with s._write() as cur:  # as clockfabric left it before audits were stored (schema version 1 as now)
        cur.execute("DROP TABLE audits")
    s.close()
    again = opener()
    assert again.host("h1") is not None and len(again.events()) == 1  # what it had stays
    stored = again.add_audit(audit(100))
    assert again.audit(stored.id) == stored and again.audits() == [replace(stored, report=None)]


def test_sqlite_file_from_before_audits_read_only(tmp_path):
    path = tmp_path / "controller.db"
    with SqliteStorage(path) as s:
        s.enroll("h1", 1)
        with s._write() as cur:
            cur.execute("DROP TABLE audits")
    with read_only(path), SqliteStorage(path) as s:  # an older file, read-only: it still opens for reading
        assert s.host("h1") is not None
    with SqliteStorage(path) as s:  # and gains the table once it can
        assert s.audits() == []


def test_newer_schema_refused(opener):
    s = opener()
    with s._write() as cur:  # as a newer clockfabric would have left it
        cur.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(ClockfabricError, match="schema version 99"):
        opener()


def test_open_storage_urls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for url, path in [("sqlite:///rel.db", tmp_path / "rel.db"), (f"sqlite:///{tmp_path}/abs.db", tmp_path / "abs.db"),
                      (str(tmp_path / "plain.db"), tmp_path / "plain.db")]:
        with open_storage(url) as s:
            assert isinstance(s, SqliteStorage)
        assert path.exists(), url
    for url, why in [("mysql://db/x", "unknown storage URL 'mysql://db/x'"),
                     ("sqlite://rel.db", "sqlite:///"), ("", "empty"),
                     (str(tmp_path / "no" / "such" / "dir.db"), "does not exist")]:
        with pytest.raises(ClockfabricError, match=why) as e:
            open_storage(url)
        assert "\n" not in str(e.value)


def test_open_storage_unreachable_postgres(tmp_path):
    with pytest.raises(ClockfabricError, match="cannot open the storage") as e:
        open_storage(f"postgresql:///x?host={tmp_path}&connect_timeout=2")
    assert "\n" not in str(e.value)


# ---- the database failing under us -------------------------------------------------------------------
def test_sqlite_locked_by_another_writer(tmp_path):
    path = tmp_path / "controller.db"
    store = SqliteStorage(path, busy_timeout_s=0.1)
    store.add_events([ev("h1", 0, 1)])
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    try:
        for write in (lambda: store.add_events([ev("h1", 1, 2)]),
                      lambda: store.enroll("h1", 1), lambda: store.open_alert(alert("k", 1))):
            t = time.monotonic()
            with pytest.raises(StorageError, match="locked"):
                write()
            assert time.monotonic() - t < 2
        assert [e.t_ns for e in store.events()] == [1]  # WAL: reads go on meanwhile
    finally:
        other.execute("ROLLBACK")
        other.close()
    store.add_events([ev("h1", 1, 2)])  # the retry after the lock is gone
    assert [e.t_ns for e in store.events()] == [1, 2]
    store.close()


@contextmanager
def read_only(path):
    """The file made read-only for the block."""
    if os.geteuid() == 0:  # root writes through file modes: make the file immutable instead
        if subprocess.run(["chattr", "+i", str(path)], check=False, capture_output=True).returncode:
            pytest.skip(f"cannot make {path} immutable (chattr +i) on this filesystem")
        undo = ["chattr", "-i", str(path)]
    else:
        path.chmod(0o444)
        undo = ["chmod", "644", str(path)]
    try:
        yield
    finally:
        subprocess.run(undo, check=True)


def test_sqlite_read_only_file(tmp_path):
    path = tmp_path / "controller.db"
    with SqliteStorage(path) as s:
        s.enroll("h1", 1)
    with read_only(path), SqliteStorage(path) as s:
        assert s.host("h1") is not None  # still opens for reading
        with pytest.raises(StorageError, match="readonly"):
            s.enroll("h2", 2)
        with pytest.raises(StorageError):
            s.add_events([ev("h1", 0, 1)])


def test_sqlite_writes_stop_waiting_out_a_lock_once_one_has_until_the_lock_is_free(tmp_path):
    """One write waits out another process's lock; those after it are refused at once, so pushes get
    503 without each holding a server thread for the busy wait; once the lock is free, writes wait again."""
    storage = SqliteStorage(tmp_path / "c.db", busy_timeout_s=1.0, quick_check_s=3600)
    lock = sqlite3.connect(tmp_path / "c.db", isolation_level=None)

    def refused_after() -> float:
        t0 = time.monotonic()
        with pytest.raises(StorageError) as e:
            storage.resolve_alert("k", 1)
        assert e.value.kind == "busy"
        return time.monotonic() - t0

    lock.execute("BEGIN EXCLUSIVE")
    assert refused_after() >= 0.9  # the first waits out the busy timeout
    assert max(refused_after() for _ in range(5)) < 0.3  # the rest do not
    lock.execute("ROLLBACK")
    assert storage.resolve_alert("k", 2) is None  # the lock is free: a write goes through
    lock.execute("BEGIN EXCLUSIVE")
    assert refused_after() >= 0.9  # and the next lock is waited out again
    with pytest.raises(StorageError):
        storage.check(3)  # the check meets it too, on its own connection
    lock.execute("ROLLBACK")
    storage.check(4)  # the check takes the lock: writes wait their turn again
    lock.execute("BEGIN EXCLUSIVE")
    assert refused_after() >= 0.9
    lock.execute("ROLLBACK")
    lock.close()
    storage.close()


def test_sqlite_a_write_locked_out_still_waits_for_a_brief_commit(tmp_path):
    """Once locked out, a write does not wait out the full timeout, but a commit of a row or two (the
    controller's own health check takes the lock the moment a foreign writer lets go) is waited for:
    the first push after the lock frees is not refused for it."""
    storage = SqliteStorage(tmp_path / "c.db", busy_timeout_s=1.0, quick_check_s=3600)
    lock = sqlite3.connect(tmp_path / "c.db", isolation_level=None, check_same_thread=False)
    lock.execute("BEGIN EXCLUSIVE")
    with pytest.raises(StorageError):
        storage.resolve_alert("k", 1)  # waits out the lock: the next writes are locked out
    taken, done = threading.Event(), threading.Event()

    def brief_commit():
        lock.execute("ROLLBACK")
        lock.execute("BEGIN IMMEDIATE")
        taken.set()
        time.sleep(0.02)
        lock.execute("COMMIT")
        done.set()

    threading.Thread(target=brief_commit).start()
    assert taken.wait(5)
    assert storage.resolve_alert("k", 2) is None  # waited the 20 ms, not refused
    assert done.wait(5)
    lock.close()
    storage.close()
