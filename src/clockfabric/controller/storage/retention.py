"""Retention of samples: raw samples are kept for a while, then rolled up into per-minute and per-hour
aggregates (count, sum, min, max per series and bucket) and deleted; minute aggregates are deleted in
their turn, hour aggregates kept. The same SQL for SQLite and PostgreSQL (integer division of BIGINTs).

A bucket that straddles the cut-off is rolled up in two runs: the upsert merges the second part into
the first (counts and sums add, extremes widen), and the raw rows are deleted as they are rolled up,
so no sample is counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from clockfabric.controller.storage.rows import loads

MINUTE_NS, HOUR_NS = 60 * 10**9, 3600 * 10**9
SCHEMA = """
CREATE TABLE IF NOT EXISTS sample_rollups (
    name TEXT NOT NULL, host TEXT NOT NULL, labels TEXT NOT NULL, bucket_ns BIGINT NOT NULL, t_ns BIGINT NOT NULL,
    n BIGINT NOT NULL, total DOUBLE PRECISION, lo DOUBLE PRECISION, hi DOUBLE PRECISION,
    PRIMARY KEY (name, host, labels, bucket_ns, t_ns));
CREATE INDEX IF NOT EXISTS sample_rollups_t ON sample_rollups (bucket_ns, t_ns);
"""
ROLL_UP = """INSERT INTO sample_rollups AS r (name, host, labels, bucket_ns, t_ns, n, total, lo, hi)
    SELECT name, host, labels, ?, bucket_t, COUNT(*), SUM(value), MIN(value), MAX(value)
    FROM (SELECT name, host, labels, (t_ns / ?) * ? AS bucket_t, value FROM samples WHERE t_ns < ?) AS old
    GROUP BY name, host, labels, bucket_t
    ON CONFLICT (name, host, labels, bucket_ns, t_ns) DO UPDATE SET n = r.n + excluded.n,
        total = r.total + excluded.total,
        lo = CASE WHEN excluded.lo < r.lo THEN excluded.lo ELSE r.lo END,
        hi = CASE WHEN excluded.hi > r.hi THEN excluded.hi ELSE r.hi END"""
ROLLUP_COLS = "name, host, labels, bucket_ns, t_ns, n, total, lo, hi"


@dataclass(frozen=True)
class Rollup:
    name: str
    host: str
    labels: dict
    bucket_ns: int  # MINUTE_NS or HOUR_NS
    t_ns: int  # the bucket's start
    n: int
    mean: float
    min: float
    max: float


def rollup(row) -> Rollup:
    name, host, labels, bucket_ns, t_ns, n, total, lo, hi = row
    return Rollup(name, host, loads(labels), bucket_ns, t_ns, n, total / n if n else float("nan"), lo, hi)


def roll_up(cur, q, raw_before_ns: int, minutes_before_ns: int) -> dict[str, int]:
    """In the caller's transaction: raw samples older than raw_before_ns into both aggregates, then
    deleted; minute aggregates older than minutes_before_ns deleted. How many rows each step touched."""
    done = {}
    for bucket in (MINUTE_NS, HOUR_NS):
        cur.execute(q(ROLL_UP), (bucket, bucket, bucket, raw_before_ns))
        done[f"rolled_up_{bucket // MINUTE_NS}m"] = cur.rowcount
    cur.execute(q("DELETE FROM samples WHERE t_ns < ?"), (raw_before_ns,))
    done["raw_deleted"] = cur.rowcount
    cur.execute(q("DELETE FROM sample_rollups WHERE bucket_ns = ? AND t_ns < ?"), (MINUTE_NS, minutes_before_ns))
    done["minutes_deleted"] = cur.rowcount
    return done
