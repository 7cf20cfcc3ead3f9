"""The leader lease: which one of several controller replicas on one PostgreSQL runs the detectors,
the alerts and their posts to Alertmanager, and the retention job.

A row in `leases` (name, holder, generation, expires_ns), on its own connection. The holder renews it
every tick; when it stops (killed, paused, cut off), another replica takes it once it expires, and
the generation goes up by one. Expiry is judged on the database server's clock, so replicas' clocks
do not matter. A leader's writes are fenced (`guard`, for `SqlStorage.fenced`): each checks, in its
own transaction, that this holder still holds this generation, so a leader that was paused past its
lease and resumes believing it leads writes nothing.
With SQLite there is one replica, which needs no lease: one process owns the file.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid

import psycopg

from clockfabric.controller.storage.postgres import PostgresStorage

log = logging.getLogger(__name__)
TTL_S = 5.0  # renewed every tick (1 s): a dead leader is replaced within TTL_S + a tick
NAME = "controller"
# the server's clock, in ns: the one clock every replica agrees on
NOW_NS = "(extract(epoch from clock_timestamp()) * 1e9)::bigint"
SCHEMA = """CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY, holder TEXT NOT NULL, generation BIGINT NOT NULL, expires_ns BIGINT NOT NULL)"""
# renew it if this holder's generation still holds it; else take it if it has expired (a new generation)
TAKE = f"""INSERT INTO leases AS l (name, holder, generation, expires_ns)
    VALUES (%(name)s, %(holder)s, 1, {NOW_NS} + %(ttl_ns)s)
    ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_ns = excluded.expires_ns,
        generation = l.generation + CASE WHEN l.holder = excluded.holder AND l.generation = %(generation)s
                                         THEN 0 ELSE 1 END
    WHERE (l.holder = excluded.holder AND l.generation = %(generation)s) OR l.expires_ns <= {NOW_NS}
    RETURNING generation"""
# FOR SHARE: a takeover waits for a fenced write in flight to commit, never overtakes it
GUARD = f"""SELECT 1 FROM leases WHERE name = ? AND holder = ? AND generation = ? AND expires_ns > {NOW_NS}
    FOR SHARE"""


def holder_id() -> str:
    """This process, unique even across restarts on one host with the same pid."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    def __init__(self, dsn: str, *, ttl_s: float = TTL_S, name: str = NAME, holder: str | None = None):
        self.dsn = dsn
        self.ttl_ns = round(ttl_s * 1e9)
        self.name = name
        self.holder = holder or holder_id()
        self.generation = 0  # the generation this replica holds; 0: none
        self._conn: psycopg.Connection | None = None
        conn = self._connection()
        with conn.transaction():  # replicas that start together create the table in turn
            conn.execute(PostgresStorage.SCHEMA_LOCK)
            conn.execute(SCHEMA)

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.dsn, autocommit=True)
            # a takeover behind a paused leader's fenced write gives up, and is tried again next tick
            self._conn.execute("SET lock_timeout = '1s'")
        return self._conn

    def hold(self) -> bool:
        """Renew the lease, or take it if it has expired: whether this replica leads until the next call.
        A database that cannot be reached leads to no: a leader cut off from it must stop acting."""
        params = {"name": self.name, "holder": self.holder, "ttl_ns": self.ttl_ns, "generation": self.generation}
        try:
            row = self._connection().execute(TAKE, params).fetchone()
        except psycopg.Error as e:
            if self._conn is not None and not self._conn.closed and self._conn.info.transaction_status:
                self._conn.rollback()
            log.warning("leader lease: cannot reach the database (%s)", " ".join(str(e).split()))
            row = None
        generation = row[0] if row else 0
        if generation != self.generation:
            log.info("leader lease %s: %s", self.name,
                     f"held, generation {generation}" if generation else f"lost (generation {self.generation})")
        self.generation = generation
        return bool(generation)

    def guard(self) -> tuple[str, tuple]:
        """The check a leader's writes make first (SqlStorage.fenced)."""
        return GUARD, (self.name, self.holder, self.generation)

    def release(self) -> None:
        """Give the lease up now (a clean stop), so another replica need not wait for it to expire."""
        if self.generation:
            try:
                self._connection().execute("UPDATE leases SET expires_ns = 0 WHERE name = %s AND holder = %s "
                                           "AND generation = %s", (self.name, self.holder, self.generation))
            except psycopg.Error:
                pass  # it expires by itself
        self.generation = 0

    def close(self) -> None:
        self.release()
        if self._conn is not None:
            self._conn.close()

