"""The default storage: one SQLite file in WAL mode (readers never wait for the writer).

Faults are looked for, not only met: every query first checks that the path still names the file
that was opened (a database deleted or replaced under a running controller would otherwise take
writes into a file that is gone at the next restart, and a file put in its place shares its -wal
and -shm files by name, so even reads go wrong), and `check` runs SQLite's `PRAGMA
quick_check` every `quick_check_s` on a connection of its own, so overwritten pages are found
before a push meets them. While the file is not ours, queries are refused with StorageError, and
while its pages are damaged, writes are (pushes get 503 and agents keep their events); a file put
back where it was, or pages that check clean again, lift it. A replaced file is never adopted
while running: restart the controller to open what the path now holds.

Reads have a connection of their own, and the check writes on a connection it opens each time: while
another process holds the file's write lock, each write waits out the busy timeout holding the
writer's turn, and reads (the alerts the API shows) or the check queued behind several such writes
would see the fault long after it began. WAL lets readers go on beside a writer.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from clockfabric.controller.storage.base import StorageError
from clockfabric.controller.storage.sql import CHECK_WRITE, SqlStorage
from clockfabric.errors import ClockfabricError

# SQLite's primary result codes (sqlite3.h; the sqlite3 module names them from Python 3.11 on)
BUSY, LOCKED, READONLY, IOERR, CORRUPT, FULL, CANTOPEN, NOTADB = 5, 6, 8, 10, 11, 13, 14, 26
# errors of the moment, which a retry later may not meet, by primary result code (extended ones carry
# it in the low byte): another writer's lock, a read-only or vanished file, a failing or full disk; and
# pages that do not read back, which no retry mends but which must not lose a push either
KINDS = {BUSY: "busy", LOCKED: "busy", READONLY: "readonly", IOERR: "io", FULL: "full", CANTOPEN: "cantopen",
         CORRUPT: "corrupt", NOTADB: "corrupt"}
# before Python 3.11 an error carries no result code, only SQLite's message for it: its text for the
# code (sqlite3_errstr), or a longer one that starts the same way
MESSAGES = (("database is locked", BUSY), ("database table is locked", LOCKED), ("database schema is locked", LOCKED),
            ("attempt to write a readonly database", READONLY), ("disk I/O error", IOERR),
            ("database or disk is full", FULL), ("unable to open database file", CANTOPEN),
            ("database disk image is malformed", CORRUPT), ("malformed database schema", CORRUPT),
            ("file is not a database", NOTADB))
# how long a write waits for another writer's lock; agents wait longer for an answer (agent.push)
BUSY_TIMEOUT_S = 5.0
# how long a write waits once one has waited out the full timeout in vain: long enough for a commit of
# a row or two (this controller's own health check writes on a connection of its own, and takes the
# lock the moment a foreign one lets go), short enough that pushes refused meanwhile hold no server thread
LOCKED_OUT_WAIT_S = 0.1
QUICK_CHECK_S = 10.0


def _kind(e: sqlite3.Error) -> str | None:
    """The kind of a SQLite error of the moment or of damage (KINDS); None for any other."""
    code: int | None = getattr(e, "sqlite_errorcode", None)
    if code is None and sys.version_info < (3, 11):
        code = next((c for text, c in MESSAGES if str(e).startswith(text)), None)
    return None if code is None else KINDS.get(code & 0xFF)


def _is_busy(e: sqlite3.Error) -> bool:
    return _kind(e) == "busy"


def _identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


class SqliteStorage(SqlStorage):
    ID = "INTEGER PRIMARY KEY"  # the rowid itself: no second index
    TABLE_EXISTS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    INDEX_EXISTS = "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?"

    def __init__(self, path: Path | str, *, busy_timeout_s: float = BUSY_TIMEOUT_S,
                 quick_check_s: float = QUICK_CHECK_S) -> None:
        """busy_timeout_s: how long a write waits for another process's lock before StorageError.
        quick_check_s: how often `check` runs PRAGMA quick_check (it reads every page)."""
        super().__init__()
        self.path = str(path)
        self.quick_check_s = quick_check_s
        self.busy_timeout_s = busy_timeout_s
        self._locked_out = False  # the last write, or check, met another's write lock past the busy wait
        self._waits = True  # whether the writer's busy wait is set (_wait_for_lock)
        self._next_quick_check = 0.0
        self._corrupt: StorageError | None = None  # what the last quick_check found, until one passes
        try:
            with self._errors():
                # isolation_level=None: no implicit transactions; writes BEGIN IMMEDIATE themselves
                self._db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                           check_same_thread=False)
                self._db.execute("PRAGMA journal_mode=WAL")
                # with WAL, NORMAL syncs at checkpoints, not at each commit: a power cut may lose the last
                # commits, never corrupt the file
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._reader = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                               check_same_thread=False)
                self._reader.execute("PRAGMA query_only=1")
            self._read_lock = threading.Lock()
            self._file = _identity(self.path)  # the file this connection has open, whatever the path names later
            self._ensure_schema()
        except (sqlite3.DatabaseError, StorageError) as e:
            if isinstance(e, StorageError) and e.kind != "corrupt":
                raise
            # not a database (a text file, a corrupt one): no retry helps
            raise ClockfabricError(f"storage {self.path} is not a SQLite database ({e}); "
                                   "give a database file or a new path") from None

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as e:
            kind = _kind(e)
            if kind is None:
                raise
            raise StorageError(f"SQLite {self.path}: {e}", kind) from e

    def _same_file(self) -> None:
        """StorageError unless the path still names the file that was opened."""
        try:
            now = _identity(self.path)
        except FileNotFoundError:
            raise StorageError(f"SQLite {self.path}: the database file was deleted under the running "
                               "controller; put it back, or restart the controller to start a new one",
                               "deleted") from None
        except OSError as e:
            raise StorageError(f"SQLite {self.path}: cannot stat the database file: {e.strerror}", "io") from None
        if now != self._file:
            raise StorageError(f"SQLite {self.path}: the database file was replaced under the running "
                               "controller; writes are refused until it is put back or the controller "
                               "restarts (and opens the new file)", "replaced")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Cursor]:
        self._same_file()
        if self._corrupt is not None:  # writing on damaged pages can only spread the damage
            raise StorageError(str(self._corrupt), self._corrupt.kind)
        self._wait_for_lock(not self._locked_out)
        with closing(self._db.cursor()) as cur:
            try:
                cur.execute("BEGIN IMMEDIATE")  # take the write lock now, not halfway through
            except sqlite3.OperationalError as e:
                self._locked_out = _is_busy(e)
                raise
            self._locked_out = False
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def _wait_for_lock(self, wait: bool) -> None:
        """The writer's busy wait, full or brief. Once a write has waited it out in vain, the next ones
        wait only LOCKED_OUT_WAIT_S (until one, or the check, takes the lock): pushes arriving meanwhile
        get 503 at once, not after a busy wait each, in turn, holding a server thread apiece."""
        if wait != self._waits:
            timeout_s = self.busy_timeout_s if wait else min(LOCKED_OUT_WAIT_S, self.busy_timeout_s)
            self._db.execute(f"PRAGMA busy_timeout = {round(timeout_s * 1000)}")
            self._waits = wait

    def _cursor(self):
        self._same_file()  # another file at the path shares our -wal and -shm: even reads go wrong
        return closing(self._reader.cursor())

    def check(self, now_ns: int) -> None:
        """The file's identity, its pages (every `quick_check_s`), then a write and a read."""
        self._same_file()
        if time.monotonic() >= self._next_quick_check:
            self._corrupt = self._quick_check()
            self._next_quick_check = time.monotonic() + self.quick_check_s
        if self._corrupt is not None:
            raise StorageError(str(self._corrupt), self._corrupt.kind)
        super().check(now_ns)

    def _check_write(self, now_ns: int) -> None:
        """On a connection of its own (mode=rw: a missing file is an error, not a new database), so the
        check waits for the file's lock, as a push does, but never behind the pushes queued for it."""
        with self._errors(), closing(sqlite3.connect(f"file:{self.path}?mode=rw", uri=True, isolation_level=None,
                                                     timeout=self.busy_timeout_s)) as db:
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                self._locked_out = self._locked_out or _is_busy(e)
                raise
            self._locked_out = False  # the lock is free again: writes wait their turn as before
            db.execute(CHECK_WRITE, (now_ns,))
            db.execute("COMMIT")

    def _quick_check(self) -> StorageError | None:
        """Read every page on a connection of its own (fresh pages, not this connection's cache;
        WAL lets it run beside the writer)."""
        try:
            with closing(sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)) as db:
                found = [row[0] for row in db.execute("PRAGMA quick_check(5)")]
        except sqlite3.Error as e:
            kind = _kind(e) or "corrupt"
            if kind == "busy":
                return None  # another writer's moment: not damage
            return StorageError(f"SQLite {self.path}: quick_check could not read the file: {e}", kind)
        if found == ["ok"]:
            return None
        return StorageError(f"SQLite {self.path}: quick_check found damaged pages: {'; '.join(found)[:300]}",
                            "corrupt")

    def size_bytes(self) -> int | None:
        total = 0
        for suffix in ("", "-wal"):
            try:
                total += os.stat(self.path + suffix).st_size
            except OSError:
                pass
        return total

    def close(self) -> None:
        with self._lock:
            self._db.close()
        with self._read_lock:
            self._reader.close()
