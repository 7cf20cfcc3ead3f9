"""Storage on a PostgreSQL server, for fleets past what one SQLite file serves well.

Writes, reads and the storage check each have a connection (and a lock) of their own, as SQLite's
do: a write waiting on another session's lock, or a long one (a roll-up), holds the writer's
turn, and reads (the alerts the API shows) or the check queued behind it would see a fault long
after it began. A write waits at most `lock_timeout_s` for another session's lock, then fails as
"busy" (a push gets 503 before the agent's own timeout); the check's write and read are bounded
the same way, so the check always answers.
"""

from __future__ import annotations

import select
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from clockfabric.controller.storage.base import StorageError
from clockfabric.controller.storage.sql import CHECK_WRITE, SqlStorage

# errors of the moment: server gone or restarting, connection lost, disk full, lock or statement
# timeouts, serialization failures (all OperationalError), and a server turned read-only (a standby)
RETRYABLE = (psycopg.OperationalError, psycopg.errors.ReadOnlySqlTransaction)
# how long a write waits for another session's lock; agents wait longer for an answer (agent.push)
LOCK_TIMEOUT_S = 5.0
WRITER, READER, CHECKER = "writer", "reader", "checker"


class PostgresStorage(SqlStorage):
    ID = "BIGSERIAL PRIMARY KEY"
    TABLE_EXISTS = "SELECT 1 WHERE to_regclass(?) IS NOT NULL"  # in the search path, as the queries see it
    INDEX_EXISTS = TABLE_EXISTS  # an index is a relation too
    # CREATE ... IF NOT EXISTS is not safe against a concurrent CREATE; any fixed key, released at commit
    SCHEMA_LOCK = "SELECT pg_advisory_xact_lock(7401)"

    def __init__(self, dsn: str, *, lock_timeout_s: float = LOCK_TIMEOUT_S) -> None:
        """lock_timeout_s: how long a write, or the check, waits for another session's lock."""
        super().__init__()
        self._dsn = dsn
        self.lock_timeout_s = lock_timeout_s
        self._conns: dict[str, psycopg.Connection | None] = dict.fromkeys((WRITER, READER, CHECKER))
        self._using = threading.local()  # the connection this thread's statement runs on, for _errors
        self._read_lock = threading.Lock()
        self._check_lock = threading.Lock()
        self._ensure_schema()

    def _q(self, sql: str) -> str:
        return sql.replace("?", "%s")

    def _connection(self, role: str) -> psycopg.Connection:
        """The role's connection, made again if it broke or the server dropped it while idle (a restart,
        a failover): the server's farewell waits unread on an idle connection's socket."""
        self._using.conn = conn = self._conns[role]
        if conn is not None and not conn.closed and _dropped(conn):
            conn.close()
        if conn is None or conn.closed:
            self._using.conn = None
            # autocommit: reads run outside transactions, writes open theirs with conn.transaction()
            conn = psycopg.connect(self._dsn, autocommit=True)
            self._using.conn = self._conns[role] = conn
            if role == READER:  # as SQLite's reader is query_only: reads can take no lock that stalls a write
                conn.execute("SET default_transaction_read_only = on")
            if role in (WRITER, CHECKER):
                conn.execute(f"SET lock_timeout = {round(self.lock_timeout_s * 1000)}")
            if role == CHECKER:  # the check answers, whatever the server is busy with; past a lock wait
                conn.execute(f"SET statement_timeout = {round(self.lock_timeout_s * 2000)}")  # ("busy")
        return conn

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except RETRYABLE as e:
            conn = getattr(self._using, "conn", None)
            if isinstance(e, psycopg.errors.ReadOnlySqlTransaction):
                kind = "readonly"
            elif isinstance(e, psycopg.errors.LockNotAvailable):
                kind = "busy"  # another session's lock, past lock_timeout_s
            elif conn is None or conn.closed:
                kind = "unreachable"  # no connection, or it broke: the server is gone or restarting
            else:
                kind = "unavailable"
            raise StorageError("PostgreSQL: " + " ".join(str(e).split()), kind) from e

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Cursor]:
        conn = self._connection(WRITER)
        with conn.transaction(), conn.cursor() as cur:
            yield cur

    def _cursor(self):
        return self._connection(READER).cursor()

    def _check_write(self, now_ns: int) -> None:
        """On the check's own connection: never behind a write that waits on a lock or runs long."""
        with self._check_lock, self._errors():
            conn = self._connection(CHECKER)
            with conn.transaction():
                conn.execute(self._q(CHECK_WRITE), (now_ns,))

    def size_bytes(self) -> int | None:
        found = self._fetch("SELECT pg_database_size(current_database())")
        return int(found[0][0]) if found else None

    def close(self) -> None:
        for role, lock in ((WRITER, self._lock), (READER, self._read_lock), (CHECKER, self._check_lock)):
            with lock:
                if (conn := self._conns[role]) is not None:
                    conn.close()


def _dropped(conn: psycopg.Connection) -> bool:
    """Whether an idle connection has something to read: nothing is due on one but the server's
    notice that it closed the session (or the end of the stream)."""
    return bool(select.select([conn.fileno()], [], [], 0)[0])
