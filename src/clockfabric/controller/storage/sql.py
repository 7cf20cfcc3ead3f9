"""The Storage methods, written once in the SQL that SQLite (3.35 or newer: upserts, RETURNING) and
PostgreSQL both speak. `sqlite.SqliteStorage` and `postgres.PostgresStorage` bring the connection,
transactions and error mapping. Samples are not here: they live in the series engine
(controller.series); a database from before keeps its old sample tables, unread.

Time windows are half-open, since_ns <= t < until_ns, so consecutive windows never share a row.
"""

from __future__ import annotations

import logging
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from clockfabric.controller.storage import pending, qos, revoked, rows
from clockfabric.controller.storage.base import Alert, Audit, Event, FenceLost, Host, StorageError
from clockfabric.controller.storage.batch import GroupCommit
from clockfabric.errors import ClockfabricError

log = logging.getLogger(__name__)
SCHEMA_VERSION = 1

# {id}: the dialect's auto-numbered key. Details and infos are canonical JSON text (rows.dumps), and
# NaN in a detail survives (PostgreSQL's JSONB would refuse it). An audit's report is JSON text too, in
# its own key order (rows.dumps_ordered): it is only ever read back whole.
SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS hosts (
    name TEXT PRIMARY KEY, enrolled_ns BIGINT NOT NULL, last_seen_ns BIGINT, info TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    id {id}, host TEXT NOT NULL, seq BIGINT NOT NULL, boot TEXT NOT NULL, t_ns BIGINT NOT NULL,
    kind TEXT NOT NULL, device TEXT NOT NULL, detail TEXT NOT NULL, synced BOOLEAN NOT NULL,
    UNIQUE (host, boot, seq));
CREATE INDEX IF NOT EXISTS events_t ON events (t_ns);
CREATE INDEX IF NOT EXISTS events_host ON events (host, id);
CREATE INDEX IF NOT EXISTS events_kind ON events (kind, id);
CREATE TABLE IF NOT EXISTS alerts (
    id {id}, key TEXT NOT NULL, kind TEXT NOT NULL, severity TEXT NOT NULL, message TEXT NOT NULL,
    opened_ns BIGINT NOT NULL, resolved_ns BIGINT, detail TEXT NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS alerts_open_key ON alerts (key) WHERE resolved_ns IS NULL;
CREATE TABLE IF NOT EXISTS audits (
    id {id}, t_ns BIGINT NOT NULL, fleet TEXT NOT NULL, verdict TEXT NOT NULL, exit_code INTEGER NOT NULL,
    counts TEXT NOT NULL, report TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS audits_t ON audits (t_ns);
CREATE TABLE IF NOT EXISTS health_check (name TEXT PRIMARY KEY, t_ns BIGINT NOT NULL);
""" + qos.SCHEMA + pending.SCHEMA + revoked.SCHEMA
# A table added to SCHEMA without changing what the others hold keeps SCHEMA_VERSION: opening an older
# database creates what it lacks (each statement is IF NOT EXISTS), and an older clockfabric ignores it.
# So with an index: one an older database lacks is built when it is opened.
TABLES = re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA)
INDEXES = re.findall(r"CREATE (?:UNIQUE )?INDEX IF NOT EXISTS (\w+)", SCHEMA)

CHECK_WRITE = "INSERT INTO health_check VALUES ('controller', ?) ON CONFLICT (name) DO UPDATE SET t_ns = excluded.t_ns"


@dataclass(frozen=True)
class Push:
    """add_push's arguments, waiting for their transaction."""
    host: str
    now_ns: int
    info: dict
    events: list[Event]


class SqlStorage(qos.QosPolicies, pending.PendingHosts, revoked.HostEpochs, ABC):
    """One connection, one lock (reads may have their own: `_read_lock`). Subclasses provide the hooks below."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read_lock = self._lock
        self._fence = threading.local()  # this thread's guard, while it writes as the leader
        self._pushes: GroupCommit[Push, int] = GroupCommit(self._lock, self._store_pushes)

    # ---- dialect hooks ---------------------------------------------------------------------------
    ID: str  # the auto-numbered key column's type
    TABLE_EXISTS: str  # a query giving a row if the table named by its one parameter exists
    INDEX_EXISTS: str  # the same for an index
    SCHEMA_LOCK = ""  # taken first when creating the schema, so replicas starting together take turns

    def _q(self, sql: str) -> str:
        """The shared SQL, written with ? placeholders, in the driver's style."""
        return sql

    @abstractmethod
    def _errors(self):
        """A context that turns the driver's retryable errors into StorageError."""

    @abstractmethod
    def _transaction(self):
        """A context yielding a cursor inside a write transaction: committed on exit, rolled back on error."""

    @abstractmethod
    def _cursor(self):
        """A context yielding a cursor for reads outside any transaction."""

    @abstractmethod
    def close(self) -> None: ...

    # ---- plumbing --------------------------------------------------------------------------------
    @contextmanager
    def fenced(self, guard: tuple[str, tuple]) -> Iterator[None]:
        """This thread's writes, while inside, first run `guard` (a query, its parameters) in their own
        transaction and raise FenceLost, writing nothing, if it gives no row: a leader's writes check
        its lease in the same transaction, so a leader paused past its lease cannot write when it resumes."""
        self._fence.guard = guard
        try:
            yield
        finally:
            self._fence.guard = None

    @contextmanager
    def _write(self) -> Iterator:
        with self._lock, self._locked_write() as cur:
            yield cur

    @contextmanager
    def _locked_write(self) -> Iterator:
        """A write transaction (fenced as _write), for a caller that holds the lock."""
        guard = getattr(self._fence, "guard", None)
        with self._errors(), self._transaction() as cur:
            if guard is not None:
                cur.execute(self._q(guard[0]), guard[1])
                if cur.fetchone() is None:
                    raise FenceLost("the leader lease is held by another replica now")
            yield cur

    def _fetch(self, sql: str, params: tuple | list = ()) -> list[tuple]:
        with self._read_lock, self._errors(), self._cursor() as cur:
            cur.execute(self._q(sql), params)
            return cur.fetchall()

    def _ensure_schema(self) -> None:
        missing = [t for t in TABLES if not self._fetch(self.TABLE_EXISTS, (t,))]
        found = [] if "schema_version" in missing else self._fetch("SELECT version FROM schema_version")
        if found:
            if found[0][0] != SCHEMA_VERSION:
                raise ClockfabricError(f"the database has schema version {found[0][0]}, this clockfabric "
                                       f"knows {SCHEMA_VERSION}: use the matching clockfabric or a new database")
            missing += [i for i in INDEXES if not self._fetch(self.INDEX_EXISTS, (i,))]
            if not missing:
                return  # nothing to write: a read-only copy still opens for reading
            log.info("adding %s to the database", ", ".join(missing))
        try:
            with self._write() as cur:
                if self.SCHEMA_LOCK:
                    cur.execute(self.SCHEMA_LOCK)
                for statement in SCHEMA.format(id=self.ID).split(";"):
                    if statement.strip():
                        cur.execute(statement)
                cur.execute("SELECT version FROM schema_version")
                if cur.fetchone() is None:
                    cur.execute(self._q("INSERT INTO schema_version (version) VALUES (?)"), (SCHEMA_VERSION,))
        except StorageError as e:
            if not found:
                raise
            # an older database that cannot be written (a read-only copy): it still opens for reading what it has
            log.warning("cannot add %s to the database (%s): they stay missing", ", ".join(missing), e)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- hosts -----------------------------------------------------------------------------------
    def enroll(self, host: str, now_ns: int) -> None:
        """Idempotent: enrolling again keeps the first enrolment time."""
        with self._write() as cur:
            cur.execute(self._q(f"INSERT INTO hosts ({rows.HOST_COLS}) VALUES (?, ?, NULL, ?) "
                                "ON CONFLICT (name) DO NOTHING"), (host, now_ns, "{}"))

    def host(self, name: str) -> Host | None:
        found = self._fetch(f"SELECT {rows.HOST_COLS} FROM hosts WHERE name = ?", (name,))
        return rows.host(found[0]) if found else None

    def hosts(self) -> list[Host]:
        # sorted here, not in SQL: PostgreSQL's text order follows the database's locale
        return sorted(map(rows.host, self._fetch(f"SELECT {rows.HOST_COLS} FROM hosts")), key=lambda h: h.name)

    def seen(self, host: str, now_ns: int, info: dict) -> None:
        """A host seen but never enrolled is enrolled now: storage keeps what it is told, policy is the caller's."""
        with self._write() as cur:
            self._seen(cur, host, now_ns, info)

    def _seen(self, cur, host: str, now_ns: int, info: dict) -> None:
        cur.execute(self._q(f"INSERT INTO hosts ({rows.HOST_COLS}) VALUES (?, ?, ?, ?) ON CONFLICT (name) "
                            "DO UPDATE SET last_seen_ns = excluded.last_seen_ns, info = excluded.info"),
                    (host, now_ns, now_ns, rows.dumps(info)))

    # ---- events ----------------------------------------------------------------------------------
    def add_events(self, events: list[Event]) -> int:
        if not events:
            return 0
        with self._write() as cur:
            return self._add_events(cur, events)

    def _add_events(self, cur, events: list[Event]) -> int:
        cur.executemany(self._q("INSERT INTO events (host, seq, boot, t_ns, kind, device, detail, synced) "
                                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (host, boot, seq) DO NOTHING"),
                        [rows.event_values(e) for e in events])
        return cur.rowcount

    def events(self, *, since_ns: int | None = None, until_ns: int | None = None, host: str | None = None,
               kind: str | None = None, after_id: int = 0, limit: int = 100) -> list[Event]:
        if since_ns is not None:  # start at the window's least id, found by the time index (id + 0: not by id)
            if (first := self._fetch("SELECT MIN(id + 0) FROM events WHERE t_ns >= ?", [since_ns])[0][0]) is None:
                return []
            after_id = max(after_id, first - 1)
        where, params = _where(after_id, ("t_ns >= ?", since_ns), ("t_ns < ?", until_ns), ("host = ?", host),
                               ("kind = ?", kind))
        return [rows.event(r) for r in self._fetch(
            f"SELECT {rows.EVENT_COLS} FROM events WHERE {where} ORDER BY id LIMIT ?", [*params, max(limit, 0)])]

    def add_push(self, host: str, now_ns: int, info: dict, events: list[Event]) -> int:
        """A host's push in one transaction: its events (as add_events) and `seen`; all of it is
        stored or none. Pushes made meanwhile by other threads share the transaction (batch.py).
        Returns how many events were new."""
        return self._pushes.submit(Push(host, now_ns, info, events))

    def _store_pushes(self, pushes: list[Push]) -> list[int]:
        """Pushes in one transaction (the lock held): events push by push, for each one's count of new
        ones; then each host seen, in arrival order."""
        with self._locked_write() as cur:
            new = [self._add_events(cur, p.events) if p.events else 0 for p in pushes]
            for p in pushes:
                self._seen(cur, p.host, p.now_ns, p.info)
        return new

    def last_event_id(self) -> int:
        """The newest event's id (0 where none): where a reader that tails them starts."""
        return int(self._fetch("SELECT COALESCE(MAX(id), 0) FROM events")[0][0])

    # ---- alerts ----------------------------------------------------------------------------------
    def open_alert(self, alert: Alert) -> Alert | None:
        if alert.resolved_ns is not None:
            raise ValueError(f"open_alert({alert.key!r}): the alert is resolved already")
        with self._write() as cur:
            # the partial unique index on open alerts' keys makes a second open one a conflict
            cur.execute(self._q("INSERT INTO alerts (key, kind, severity, message, opened_ns, detail) "
                                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id"),
                        rows.alert_values(alert))
            row = cur.fetchone()
        return None if row is None else replace(alert, id=row[0])

    def resolve_alert(self, key: str, now_ns: int) -> Alert | None:
        with self._write() as cur:
            cur.execute(self._q(f"UPDATE alerts SET resolved_ns = ? WHERE key = ? AND resolved_ns IS NULL "
                                f"RETURNING {rows.ALERT_COLS}"), (now_ns, key))
            row = cur.fetchone()
        return None if row is None else rows.alert(row)

    def alerts(self, *, open_only: bool = False, since_ns: int | None = None, until_ns: int | None = None,
               after_id: int = 0, limit: int = 100) -> list[Alert]:
        """The alerts open at any time in [since_ns, until_ns): opened before its end, not resolved before its start."""
        where, params = _where(after_id, ("resolved_ns IS NULL", True if open_only else None),
                               ("(resolved_ns IS NULL OR resolved_ns >= ?)", since_ns), ("opened_ns < ?", until_ns))
        return [rows.alert(r) for r in self._fetch(
            f"SELECT {rows.ALERT_COLS} FROM alerts WHERE {where} ORDER BY id LIMIT ?", [*params, max(limit, 0)])]

    # ---- health ----------------------------------------------------------------------------------
    def check(self, now_ns: int) -> None:
        """Write a row and read it back: a database that answers reads but takes no write (locked,
        full, read-only, gone) fails here, as a push would."""
        self._check_write(now_ns)
        if not self._fetch("SELECT t_ns FROM health_check WHERE name = 'controller'"):
            raise StorageError("the health check row written just now does not read back", "corrupt")

    def _check_write(self, now_ns: int) -> None:
        with self._write() as cur:
            cur.execute(self._q(CHECK_WRITE), (now_ns,))

    # ---- audits ----------------------------------------------------------------------------------
    def add_audit(self, audit: Audit) -> Audit:
        if audit.report is None:
            raise ValueError("add_audit: an audit is stored with its report")
        with self._write() as cur:
            cur.execute(self._q("INSERT INTO audits (t_ns, fleet, verdict, exit_code, counts, report) "
                                "VALUES (?, ?, ?, ?, ?, ?) RETURNING id"), rows.audit_values(audit))
            return replace(audit, id=cur.fetchone()[0])  # committed as the block ends

    def audits(self, *, since_ns: int | None = None, until_ns: int | None = None, after_id: int = 0,
               limit: int = 100) -> list[Audit]:
        where, params = _where(after_id, ("t_ns >= ?", since_ns), ("t_ns < ?", until_ns))
        return [rows.audit(r) for r in self._fetch(
            f"SELECT {rows.AUDIT_COLS} FROM audits WHERE {where} ORDER BY id LIMIT ?", [*params, max(limit, 0)])]

    def audit(self, id_: int) -> Audit | None:
        found = self._fetch(f"SELECT {rows.AUDIT_COLS}, report FROM audits WHERE id = ?", (id_,))
        return rows.audit(found[0]) if found else None


def _where(after_id: int, *conditions: tuple[str, object]) -> tuple[str, list]:
    """`id > after_id` and each condition whose value is not None; a condition without ? takes no value."""
    given = [(clause, value) for clause, value in conditions if value is not None]
    return " AND ".join(["id > ?", *(c for c, _ in given)]), [after_id, *(v for c, v in given if "?" in c)]
