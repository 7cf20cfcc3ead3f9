"""PostgreSQL: writes, reads and the storage check on connections of their own, so a write stuck
on another session's lock, or a long one, stalls neither the reads nor the check; a write waits
for a lock at most lock_timeout_s. Against the real server the tests start (tests/pg.py)."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest

from clockfabric.controller.storage.base import Event, StorageError
from tests.waiting import wait_for

PROMPT_S = 2.0  # a read or a check that does not queue behind the writer answers well within this


@pytest.fixture
def dsn(postgres_server):
    return postgres_server.create_database(f"t_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def open_store(dsn):
    from clockfabric.controller.storage.postgres import PostgresStorage

    opened = []

    def open_(**kw):
        opened.append(PostgresStorage(dsn, **kw))
        return opened[-1]

    yield open_
    for s in opened:
        s.close()


def ev(seq: int) -> Event:
    return Event(host="h1", seq=seq, boot="b1", t_ns=seq, kind="link_down")


def prompt(work) -> None:
    """Run `work` on a thread of its own, raising what it raised; fails if it is not done within PROMPT_S."""
    done: list[BaseException | None] = []

    def run() -> None:
        try:
            work()
            done.append(None)
        except BaseException as e:
            done.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(PROMPT_S)
    assert done, "it waited behind the writer"
    if done[0] is not None:
        raise done[0]


def reads_and_check(store):
    return [lambda: store.events(), lambda: store.alerts(open_only=True), lambda: store.hosts(),
            lambda: store.check(time.time_ns()), lambda: store.size_bytes()]


def test_reads_and_the_check_answer_while_a_write_holds_the_writers_turn(open_store):
    store = open_store()
    store.add_events([ev(1)])
    with store._lock:  # the writer's turn, held by a long write (a roll-up, a big group commit)
        for work in reads_and_check(store):
            prompt(work)
        assert [e.seq for e in store.events()] == [1]


def test_a_write_waiting_on_another_sessions_lock_stalls_no_read(open_store, dsn):
    store = open_store(lock_timeout_s=30.0)
    store.add_events([ev(1)])
    with psycopg.connect(dsn) as other:  # another session, in a transaction that blocks writes to events
        other.execute("LOCK TABLE events IN EXCLUSIVE MODE")
        writer = threading.Thread(target=lambda: store.add_events([ev(2)]), daemon=True)
        writer.start()
        wait_for("the write to wait on the lock", lambda: store._lock.locked(), timeout_s=5)
        time.sleep(0.3)
        assert writer.is_alive()  # stuck on the lock, holding the writer's turn
        for work in reads_and_check(store):
            prompt(work)
        other.rollback()
    writer.join(10)
    assert not writer.is_alive() and [e.seq for e in store.events()] == [1, 2]


def test_a_write_waits_for_another_sessions_lock_at_most_lock_timeout(open_store, dsn):
    store = open_store(lock_timeout_s=0.3)
    with psycopg.connect(dsn) as other:
        other.execute("LOCK TABLE events IN EXCLUSIVE MODE")
        t = time.monotonic()
        with pytest.raises(StorageError, match="lock timeout") as e:
            store.add_events([ev(1)])
        assert e.value.kind == "busy" and 0.25 < time.monotonic() - t < PROMPT_S
        store.check(time.time_ns())  # the database still takes writes elsewhere: storage is not failing
        other.rollback()
    store.add_events([ev(1)])  # the retry, once the lock is gone
    assert [e.seq for e in store.events()] == [1]


def test_the_check_fails_busy_and_answers_when_its_row_is_locked(open_store, dsn):
    store = open_store(lock_timeout_s=0.3)
    with psycopg.connect(dsn) as other:
        other.execute("LOCK TABLE health_check IN EXCLUSIVE MODE")
        with pytest.raises(StorageError) as e:
            prompt(lambda: store.check(time.time_ns()))
        other.rollback()
    assert e.value.kind == "busy"
    store.check(time.time_ns())


def test_the_check_waits_on_a_lock_no_longer_than_lock_timeout(open_store, dsn):
    """What bounds the check above: with a long lock_timeout_s, it waits on the lock."""
    store = open_store(lock_timeout_s=30.0)
    with psycopg.connect(dsn) as other:
        other.execute("LOCK TABLE health_check IN EXCLUSIVE MODE")
        with pytest.raises(AssertionError, match="waited behind"):
            prompt(lambda: store.check(time.time_ns()))
        other.rollback()


def test_reads_run_on_a_read_only_connection(open_store):
    store = open_store()
    with pytest.raises(StorageError) as e:
        store._fetch("INSERT INTO health_check VALUES ('reader', 1) RETURNING name")
    assert e.value.kind == "readonly"


def test_connections_the_server_dropped_while_idle_are_made_again(open_store, dsn):
    store = open_store()
    store.enroll("h1", 1)
    store.check(time.time_ns())
    with psycopg.connect(dsn, autocommit=True) as admin:  # as a server restart or a failover would
        dropped = [r[0] for r in admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")]
        assert len(dropped) == 3  # the writer's, the reader's and the check's
        admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (dropped,))
        wait_for("the sessions to end", lambda: not admin.execute(
            "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", (dropped,)).fetchall(), timeout_s=10)
    store.add_events([ev(1)])  # no error: each connection is found dropped before it is used
    assert [e.seq for e in store.events()] == [1] and store.host("h1") is not None
    store.check(time.time_ns())
