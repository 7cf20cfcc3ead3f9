"""The default storage: one SQLite file in WAL mode (readers never wait for the writer)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from clockfabric.controller.storage.base import StorageError
from clockfabric.controller.storage.sql import SqlStorage
from clockfabric.errors import ClockfabricError

# errors of the moment, which a retry later may not meet: another writer holding the lock, a read-only
# or vanished file, a failing or full disk (primary result codes; extended ones carry them in the low byte)
RETRYABLE = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR,
             sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN}
# how long a write waits for another writer's lock; agents wait longer for an answer (agent.push)
BUSY_TIMEOUT_S = 5.0


class SqliteStorage(SqlStorage):
    ID = "INTEGER PRIMARY KEY"  # the rowid itself: no second index
    LATEST_OPTIONS = " WITHOUT ROWID"  # `latest` is found by its key only: store it in the key's b-tree
    TABLE_EXISTS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"

    def __init__(self, path: Path | str, *, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        """busy_timeout_s: how long a write waits for another process's lock before StorageError."""
        super().__init__()
        self.path = str(path)
        try:
            with self._errors():
                # isolation_level=None: no implicit transactions; writes BEGIN IMMEDIATE themselves
                self._db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                           check_same_thread=False)
                self._db.execute("PRAGMA journal_mode=WAL")
                # with WAL, NORMAL syncs at checkpoints, not at each commit: a power cut may lose the last
                # commits, never corrupt the file
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._ensure_schema()
        except sqlite3.DatabaseError as e:  # not a database (a text file, a corrupt one): no retry helps
            raise ClockfabricError(f"storage {self.path} is not a SQLite database ({e}); "
                                   "give a database file or a new path") from None

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as e:
            if getattr(e, "sqlite_errorcode", 0) & 0xFF in RETRYABLE:
                raise StorageError(f"SQLite {self.path}: {e}") from e
            raise

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Cursor]:
        with closing(self._db.cursor()) as cur:
            cur.execute("BEGIN IMMEDIATE")  # take the write lock now, not halfway through
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def _cursor(self):
        return closing(self._db.cursor())

    def _sample_ids(self, cur: sqlite3.Cursor, n: int) -> range:
        # safe: BEGIN IMMEDIATE holds the only write lock on the file until COMMIT
        first = cur.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM samples").fetchone()[0]
        return range(first, first + n)

    def close(self) -> None:
        with self._lock:
            self._db.close()
