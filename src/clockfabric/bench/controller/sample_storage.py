"""Bytes a host-day of samples takes, raw and after the retention job's roll-ups, on SQLite and
PostgreSQL, and what a year of a fleet needs on disk.

The load is controller-scale's simulated agent (controller_scale_load.samples: 167 series a host,
one push a second), stored through the controller's own storage (add_samples), then rolled up
by its retention job (roll_up: per-minute and per-hour aggregates, raw rows deleted). Each table's
bytes (its indexes included) over its rows give bytes a row; a host-day is 86,400 pushes of raw
rows, 1,440 minute rows and 24 hour rows a series.

Beside it, in the same run and on the same rows, the compact form: raw samples packed, one row
per series and minute holding the minute's times (milliseconds into the minute, 2 bytes) and
values (8 bytes) as arrays, and roll-ups as they are but keyed by the series' number (its name,
host and labels once, in a table of their own): what the same data would take stored that way.

    clockfabric bench sample-storage [--hosts 12] [--minutes 10] [--no-postgres] [--out PATH]
"""

from __future__ import annotations

import sqlite3
import struct
import tempfile
from collections import defaultdict
from contextlib import closing
from pathlib import Path
from typing import Annotated

import psycopg
import typer
from rich.console import Console
from rich.table import Table

from clockfabric.bench import harness
from clockfabric.bench.controller.ingest import _test_postgres
from clockfabric.bench.controller.scale_load import samples as pushed
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, record
from clockfabric.controller.storage.base import Sample
from clockfabric.controller.storage.retention import HOUR_NS, MINUTE_NS
from clockfabric.controller.storage.sqlite import SqliteStorage

DEFAULT_JSON = RESULTS / "sample-storage.json"
START_NS = 1_700_000_000 * 10**9 // HOUR_NS * HOUR_NS  # on the hour: the minutes land in one hour bucket
PUSHES_A_DAY = 86_400  # one push a second, agent.config's update_s
RAW_DAYS, MINUTE_DAYS = 7, 90  # the controller's --keep-raw-days and --keep-minute-days defaults
FLEETS = (1_000, 10_000, 100_000)
CUT_BAR = 10.0  # the packed form against rows as stored now, bytes a raw sample
PACKED_SQLITE = """CREATE TABLE series (id INTEGER PRIMARY KEY, name TEXT NOT NULL, host TEXT NOT NULL,
    labels TEXT NOT NULL, UNIQUE (name, host, labels));
CREATE TABLE packed (series INTEGER NOT NULL, minute_ns INTEGER NOT NULL, offsets_ms BLOB NOT NULL,
    vals BLOB NOT NULL, PRIMARY KEY (series, minute_ns)) WITHOUT ROWID;
CREATE TABLE rolled (series INTEGER NOT NULL, bucket_ns INTEGER NOT NULL, t_ns INTEGER NOT NULL, n INTEGER NOT NULL,
    total REAL, lo REAL, hi REAL, PRIMARY KEY (series, bucket_ns, t_ns)) WITHOUT ROWID;"""
PACKED_POSTGRES = """CREATE TABLE series (id INTEGER PRIMARY KEY, name TEXT NOT NULL, host TEXT NOT NULL,
    labels TEXT NOT NULL, UNIQUE (name, host, labels));
CREATE TABLE packed (series INTEGER NOT NULL, minute_ns BIGINT NOT NULL, offsets_ms BYTEA NOT NULL,
    vals BYTEA NOT NULL, PRIMARY KEY (series, minute_ns));
CREATE TABLE rolled (series INTEGER NOT NULL, bucket_ns BIGINT NOT NULL, t_ns BIGINT NOT NULL, n BIGINT NOT NULL,
    total DOUBLE PRECISION, lo DOUBLE PRECISION, hi DOUBLE PRECISION, PRIMARY KEY (series, bucket_ns, t_ns));"""
ROLLUPS = "SELECT name, host, labels, bucket_ns, t_ns, n, total, lo, hi FROM sample_rollups"
out = Console(width=160)


def load(hosts: int, minutes: int) -> list[list[Sample]]:
    """Every push of `hosts` simulated agents over `minutes`, as the controller stores them."""
    per_host = {f"sim{h:05d}": pushed(f"sim{h:05d}", hosts) for h in range(hosts)}
    return [[Sample(host, START_NS + s * 10**9 + h * 1000, d["name"], d["value"], d.get("labels", {}))
             for h, (host, body) in enumerate(per_host.items()) for d in body]
            for s in range(minutes * 60)]


def packed_rows(batches: list[list[Sample]]) -> tuple[list[tuple], list[tuple]]:
    """(series rows, packed rows): each series' samples of each minute as two arrays."""
    from clockfabric.controller.storage.rows import labels_text

    ids: dict[tuple, int] = {}
    minutes: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)
    for batch in batches:
        for s in batch:
            key = (s.name, s.host, labels_text(s.labels))
            series = ids.setdefault(key, len(ids) + 1)
            minute = s.t_ns // MINUTE_NS * MINUTE_NS
            minutes[(series, minute)].append(((s.t_ns - minute) // 10**6, s.value))
    series_rows = [(i, *key) for key, i in ids.items()]
    rows = [(series, minute, struct.pack(f"<{len(pts)}H", *(p[0] for p in pts)),
             struct.pack(f"<{len(pts)}d", *(p[1] for p in pts))) for (series, minute), pts in minutes.items()]
    return series_rows, rows


def sqlite_bytes(path: str, tables: dict[str, str]) -> dict[str, int]:
    """Bytes of each table with its indexes (dbstat: pages in use), by table; tables: index -> its table."""
    with closing(sqlite3.connect(path)) as conn:
        found = dict(conn.execute("SELECT name, SUM(pgsize - unused) FROM dbstat GROUP BY name").fetchall())
    sizes: dict[str, int] = defaultdict(int)
    for name, size in found.items():
        if name in tables:
            sizes[tables[name]] += size
    return dict(sizes)


def sqlite_case(batches: list[list[Sample]], folder: Path) -> dict:
    db = str(folder / "samples.db")
    storage = SqliteStorage(db)
    for batch in batches:
        storage.add_samples(batch)
    raw_rows = sum(map(len, batches))
    with closing(sqlite3.connect(db)) as conn:
        indexes = dict(conn.execute("SELECT name, tbl_name FROM sqlite_master").fetchall())
    raw = sqlite_bytes(db, indexes)["samples"]
    end = START_NS + len(batches) * 10**9
    storage.roll_up(end + 1, START_NS)  # every raw row into both aggregates, the minute ones kept
    storage.close()
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("VACUUM")
        counts = dict(conn.execute("SELECT bucket_ns, COUNT(*) FROM sample_rollups GROUP BY bucket_ns").fetchall())
        rollups = conn.execute(ROLLUPS).fetchall()
    rollup = sqlite_bytes(db, indexes)["sample_rollups"]
    series_rows, rows = packed_rows(batches)
    packed_db = str(folder / "packed.db")
    with closing(sqlite3.connect(packed_db)) as conn:
        conn.executescript(PACKED_SQLITE)
        conn.executemany("INSERT INTO series VALUES (?, ?, ?, ?)", series_rows)
        conn.executemany("INSERT INTO packed VALUES (?, ?, ?, ?)", rows)
        conn.executemany("INSERT INTO rolled VALUES (?, ?, ?, ?, ?, ?, ?)", interned(series_rows, rollups))
        conn.commit()
        packed_indexes = dict(conn.execute("SELECT name, tbl_name FROM sqlite_master").fetchall())
    packed = sqlite_bytes(packed_db, packed_indexes)
    return figures({"raw": raw, "rollups": rollup, **packed}, raw_rows, counts, len(series_rows))


def postgres_case(batches: list[list[Sample]], throwaway_postgres) -> dict:
    from clockfabric.controller.storage.postgres import PostgresStorage

    with throwaway_postgres(fsync=False) as server:  # sizes, not speed: fsync changes neither
        dsn = server.create_database("samples")
        storage = PostgresStorage(dsn)
        for batch in batches:
            storage.add_samples(batch)
        end = START_NS + len(batches) * 10**9
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE samples")
            raw = _pg_size(conn, "samples")
            storage.roll_up(end + 1, START_NS)
            conn.execute("VACUUM FULL sample_rollups")
            rollup = _pg_size(conn, "sample_rollups")
            counts: dict[int, int] = dict(conn.execute(
                "SELECT bucket_ns, COUNT(*) FROM sample_rollups GROUP BY bucket_ns").fetchall())
            series_rows, rows = packed_rows(batches)
            conn.execute(PACKED_POSTGRES)
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO series VALUES (%s, %s, %s, %s)", series_rows)
                cur.executemany("INSERT INTO packed VALUES (%s, %s, %s, %s)", rows)
                cur.executemany("INSERT INTO rolled VALUES (%s, %s, %s, %s, %s, %s, %s)",
                                interned(series_rows, conn.execute(ROLLUPS).fetchall()))
            for table in ("packed", "series", "rolled"):
                conn.execute(f"VACUUM ANALYZE {table}")
            sizes = {table: _pg_size(conn, table) for table in ("packed", "series", "rolled")}
        storage.close()
    return figures({"raw": raw, "rollups": rollup, **sizes}, sum(map(len, batches)), counts, len(series_rows))


def _pg_size(conn, table: str) -> int:
    row = conn.execute("SELECT pg_total_relation_size(%s)", (table,)).fetchone()
    return int(row[0]) if row else 0


def interned(series_rows: list[tuple], rollups: list[tuple]) -> list[tuple]:
    """The controller's roll-up rows keyed by their series' number instead of its name, host and labels."""
    ids = {(name, host, labels): i for i, name, host, labels in series_rows}
    return [(ids[(name, host, labels)], *rest) for name, host, labels, *rest in rollups]


def figures(sizes: dict[str, int], raw_rows: int, counts: dict, n_series: int) -> dict:
    """Bytes a row of each form. sizes: bytes of raw, rollups (as stored now), packed, series, rolled."""
    rollup_rows = sum(counts.values())
    # the series table is a fleet's, not a day's: counted against the raw samples all the same
    per_packed = (sizes["packed"] + sizes["series"]) / raw_rows
    return {"raw_bytes_a_sample": round(sizes["raw"] / raw_rows, 1),
            "rollup_bytes_a_row": round(sizes["rollups"] / rollup_rows, 1),
            "packed_bytes_a_sample": round(per_packed, 2),
            "interned_rollup_bytes_a_row": round(sizes["rolled"] / rollup_rows, 1),
            "raw_rows": raw_rows, "rollup_rows": counts, "series": n_series, "bytes": sizes}


def host_day(case: dict, samples_a_push: int, series_a_host: float) -> dict:
    """Bytes a host-day: raw as stored now and packed, and each aggregate as stored now and interned."""
    rows = {"minutes": series_a_host * 1440, "hours": series_a_host * 24}
    return {"raw": round(case["raw_bytes_a_sample"] * samples_a_push * PUSHES_A_DAY),
            "packed": round(case["packed_bytes_a_sample"] * samples_a_push * PUSHES_A_DAY),
            **{k: round(case["rollup_bytes_a_row"] * n) for k, n in rows.items()},
            **{f"{k}_interned": round(case["interned_rollup_bytes_a_row"] * n) for k, n in rows.items()}}


def year(day: dict, raw_days: float, form: str = "now") -> float:
    """Bytes a host keeps in steady state: raw_days of raw, MINUTE_DAYS of minutes, a year of hours,
    as stored now or (form "compact") raw packed and roll-ups interned."""
    raw, rolled = ("raw", "") if form == "now" else ("packed", "_interned")
    return day[raw] * raw_days + day[f"minutes{rolled}"] * MINUTE_DAYS + day[f"hours{rolled}"] * 365


@BENCHMARKS.register("sample-storage")
def main(hosts: Annotated[int, typer.Option(min=11, help="Simulated agents (each has 10 peers).")] = 12,
         minutes: Annotated[int, typer.Option(min=1, max=59, help="Minutes of pushes, one a second.")] = 10,
         postgres: Annotated[bool, typer.Option(help="Also on a throwaway PostgreSQL server.")] = True,
         json_path: Annotated[Path, typer.Option("--out", help="Where the record goes.")] = DEFAULT_JSON) -> None:
    """Bytes a host-day of samples on SQLite and PostgreSQL, as stored now and packed."""
    facts = harness.machine()
    batches = load(hosts, minutes)
    samples_a_push = len(pushed("sim00000", hosts))
    cases: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-samples-") as tmp:
        cases["sqlite"] = sqlite_case(batches, Path(tmp))
    missing, throwaway_postgres = _test_postgres()
    why = missing() if postgres else "--no-postgres"
    if why is None:
        cases["postgresql"] = postgres_case(batches, throwaway_postgres)
    else:
        out.print(f"[yellow]PostgreSQL skipped: {why}[/]")
    days = {db: host_day(case, samples_a_push, case["series"] / hosts) for db, case in cases.items()}
    table = Table(title=f"a host-day of samples ({samples_a_push} a push, a push a second), "
                        f"from {hosts} hosts x {minutes} min")
    for col in ("database", "B a raw row", "raw GB", "packed GB", "raw / packed", "minutes MB", "interned MB",
                "hours MB", "interned MB"):
        table.add_column(col, justify="right")
    for db, day in days.items():
        table.add_row(db, f"{cases[db]['raw_bytes_a_sample']:.0f}", f"{day['raw'] / 1e9:.2f}",
                      f"{day['packed'] / 1e9:.3f}", f"{day['raw'] / day['packed']:.1f}x", f"{day['minutes'] / 1e6:.0f}",
                      f"{day['minutes_interned'] / 1e6:.0f}", f"{day['hours'] / 1e6:.1f}",
                      f"{day['hours_interned'] / 1e6:.1f}")
    out.print(table)
    fleets = {db: {str(n): {"now_tb": round(n * year(day, RAW_DAYS) / 1e12, 1),
                            "compact_tb": round(n * year(day, RAW_DAYS, "compact") / 1e12, 1)}
                   for n in FLEETS} for db, day in days.items()}
    for db, by_size in fleets.items():
        out.print(f"{db}: a year ({RAW_DAYS} d raw, {MINUTE_DAYS} d minutes, hours for good), TB now -> compact: "
                  + ", ".join(f"{n} hosts {f['now_tb']} -> {f['compact_tb']}" for n, f in by_size.items()))
    judged = [Target(f"raw samples packed, bytes cut ({db})", round(days[db]["raw"] / days[db]["packed"], 1), CUT_BAR,
                     "x", better="higher", note="the packed form is measured beside the stored rows, not yet "
                                                "what the controller writes") for db in days]
    figures_ = {f"{db} GB a host-day raw / packed / minute roll-ups / interned": [
        round(d["raw"] / 1e9, 2), round(d["packed"] / 1e9, 3), round(d["minutes"] / 1e9, 3),
        round(d["minutes_interned"] / 1e9, 3)] for db, d in days.items()}
    figures_.update({f"{db} TB a year of 10,000 hosts, now / compact": [f["10000"]["now_tb"], f["10000"]["compact_tb"]]
                     for db, f in fleets.items()})
    record("sample-storage", judged, facts, {"cases": cases, "host_day_bytes": days, "year_tb": fleets,
                                             "hosts": hosts, "minutes": minutes, "samples_a_push": samples_a_push,
                                             "raw_days": RAW_DAYS, "minute_days": MINUTE_DAYS}, figures_,
           path=json_path)
    out.print(harness.targets_table("sample-storage", judged))
    out.print(f"raw: {json_path}")
