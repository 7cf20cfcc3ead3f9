"""Controller storage ingest: samples per second into SQLite and PostgreSQL, in batches the size of
an agent's push. Target: 50k samples/s into SQLite on this machine.

A push is one host's samples at one time: 5 metrics (owd_p50/p99/min_ns, loss_ratio, probes_total)
x 25 peers x 2 paths x 2 directions = 500 samples, each its own series, so every sample also
updates the `latest` table (the worst case for it); 32 hosts take turns. Samples are built before
the clock starts (decoding a push is the API's cost, not storage's).

Ours: Storage.add_samples, one transaction per push: the samples' rows (SQLite: executemany;
PostgreSQL: COPY) and the upsert of the newest sample per series into `latest` (SQLite: executemany
of the newest per series, picked in Python; PostgreSQL: one INSERT ... SELECT from the rows copied in).
Baselines, in the same run, on the same schema and indexes and the same database settings:
  - naive: one INSERT per sample, each its own transaction (autocommit), no `latest` table: what a
    first, unbatched implementation does. Fewer samples (--naive-samples): it is the slow side.
  - executemany: one executemany of the push's rows per transaction, no `latest` table: the floor
    of any batched design, so ours / executemany is the price of keeping `latest`.
  - PostgreSQL only, ours with executemany instead of COPY for the samples: the choice PostgresStorage made.
PostgreSQL is a throwaway server (tests/pg.py) with its default, durable settings (fsync on,
synchronous_commit on); SQLite is WAL with synchronous=NORMAL, as SqliteStorage sets it.

    clockfabric bench controller-ingest [--samples 100000] [--repeat 3] [--no-postgres] [--out PATH]
"""

from __future__ import annotations

import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import product
from pathlib import Path
from typing import Annotated

import psycopg
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from clockfabric.bench import harness
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, record
from clockfabric.controller.storage.base import Sample
from clockfabric.controller.storage.postgres import PostgresStorage
from clockfabric.controller.storage.rows import dumps
from clockfabric.controller.storage.sql import SqlStorage
from clockfabric.controller.storage.sqlite import SqliteStorage

HOSTS, PEERS, PATHS = 32, 25, 2
NAMES = ("owd_p50_ns", "owd_p99_ns", "owd_min_ns", "loss_ratio", "probes_total")
T0 = 1_700_000_000_000_000_000
TARGET_SAMPLES_S = 50_000
DEFAULT_JSON = RESULTS / "controller-ingest.json"
INSERT_SQL = "INSERT INTO samples (host, t_ns, name, value, labels) VALUES ({p}, {p}, {p}, {p}, {p})"

out = Console()
if not out.is_terminal:
    out = Console(width=160)  # a log or a pipe: keep the table's columns readable
err = Console(stderr=True)


class PostgresExecutemany(PostgresStorage):
    """PostgresStorage with the shared executemany insert in place of its COPY."""

    _insert_samples = SqlStorage._insert_samples


# ---- data --------------------------------------------------------------------------------------------
def make_pushes(n_samples: int, batch: int) -> list[list[Sample]]:
    rng = random.Random(1)
    series = [(name, {"peer": f"h{peer:03d}", "path": str(path), "direction": d})
              for name, peer, path, d in product(NAMES, range(PEERS), range(PATHS), ("tx", "rx"))]
    pushes = []
    for i in range((n_samples + batch - 1) // batch):
        host, t = f"h{i % HOSTS:03d}", T0 + (i // HOSTS) * 1_000_000_000
        chosen = (series[j % len(series)] for j in range(batch))
        pushes.append([Sample(host, t, name, rng.uniform(1e3, 1e5), labels) for name, labels in chosen])
    return pushes


# ---- the contenders: each takes a fresh database target and the pushes, returns seconds ---------------
def timed_storage(open_: Callable[[], SqlStorage], pushes: list[list[Sample]]) -> float:
    with open_() as store:
        t = time.perf_counter()
        for push in pushes:
            store.add_samples(push)
        dt = time.perf_counter() - t
        series = {(s.host, dumps(s.labels)) for push in pushes for s in push if s.name == "owd_p99_ns"}
        assert len(store.latest_samples("owd_p99_ns")) == len(series)
    return dt


def row(s: Sample) -> tuple:
    return s.host, s.t_ns, s.name, s.value, dumps(s.labels)


def sqlite_raw(path: str) -> sqlite3.Connection:
    SqliteStorage(path).close()  # the same schema and indexes; WAL stays set in the file
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA synchronous=NORMAL")
    return db


def sqlite_naive(path: str, pushes: list[list[Sample]]) -> float:
    db, sql = sqlite_raw(path), INSERT_SQL.format(p="?")
    t = time.perf_counter()
    for push in pushes:
        for s in push:
            db.execute(sql, row(s))
    dt = time.perf_counter() - t
    db.close()
    return dt


def sqlite_executemany(path: str, pushes: list[list[Sample]]) -> float:
    db, sql = sqlite_raw(path), INSERT_SQL.format(p="?")
    t = time.perf_counter()
    for push in pushes:
        db.execute("BEGIN")
        db.executemany(sql, [row(s) for s in push])
        db.execute("COMMIT")
    dt = time.perf_counter() - t
    db.close()
    return dt


def pg_raw(dsn: str) -> psycopg.Connection:
    PostgresStorage(dsn).close()
    return psycopg.connect(dsn, autocommit=True)


def pg_naive(dsn: str, pushes: list[list[Sample]]) -> float:
    conn, sql = pg_raw(dsn), INSERT_SQL.format(p="%s")
    t = time.perf_counter()
    for push in pushes:
        for s in push:
            conn.execute(sql, row(s))
    dt = time.perf_counter() - t
    conn.close()
    return dt


def pg_executemany(dsn: str, pushes: list[list[Sample]]) -> float:
    conn, sql = pg_raw(dsn), INSERT_SQL.format(p="%s")
    t = time.perf_counter()
    for push in pushes:
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(sql, [row(s) for s in push])
    dt = time.perf_counter() - t
    conn.close()
    return dt


# ---- measuring ---------------------------------------------------------------------------------------
def measure(name: str, run: Callable[[], float], samples: int, repeat: int, bar: Progress, task) -> dict:
    bar.update(task, description=name)
    secs = []
    for _ in range(repeat):
        secs.append(run())
        bar.advance(task)
    rates = [samples / s for s in secs]
    return {"case": name, "samples": samples, "seconds": secs, "samples_per_s": rates,
            "median_samples_per_s": statistics.median(rates)}


def sqlite_cases(pushes, naive_pushes, repeat, workdir: Path, bar, task) -> list[dict]:
    counter = iter(range(1_000_000))

    def fresh() -> str:
        return str(workdir / f"ingest{next(counter)}.db")

    n, n_naive = sum(map(len, pushes)), sum(map(len, naive_pushes))
    return [measure("sqlite: ours (add_samples)", lambda: timed_storage(lambda: SqliteStorage(fresh()), pushes),
                    n, repeat, bar, task),
            measure("sqlite: executemany, no latest", lambda: sqlite_executemany(fresh(), pushes), n, repeat,
                    bar, task),
            measure("sqlite: naive, row per transaction", lambda: sqlite_naive(fresh(), naive_pushes), n_naive,
                    repeat, bar, task)]


def _test_postgres():
    """The tests' throwaway PostgreSQL server (tests/pg.py): (missing, throwaway_postgres), or a
    `missing` that says why there is none outside a checkout of the repository."""
    sys.path.insert(0, str(Path.cwd()))
    try:
        from tests.pg import missing, throwaway_postgres
    except ImportError:
        return (lambda: "tests/pg.py not found: run from the repository"), None
    finally:
        sys.path.pop(0)
    return missing, throwaway_postgres


def postgres_cases(pushes, naive_pushes, repeat, bar, task, throwaway_postgres) -> tuple[list[dict], str]:
    counter = iter(range(1_000_000))
    with throwaway_postgres(fsync=True) as server:
        def fresh() -> str:
            return server.create_database(f"ingest{next(counter)}")

        with psycopg.connect(server.dsn()) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            version = row[0] if row else "unknown"
        n, n_naive = sum(map(len, pushes)), sum(map(len, naive_pushes))
        return [measure("postgres: ours (add_samples, COPY)",
                        lambda: timed_storage(lambda: PostgresStorage(fresh()), pushes), n, repeat, bar, task),
                measure("postgres: ours, executemany not COPY",
                        lambda: timed_storage(lambda: PostgresExecutemany(fresh()), pushes), n, repeat, bar, task),
                measure("postgres: executemany, no latest", lambda: pg_executemany(fresh(), pushes), n, repeat,
                        bar, task),
                measure("postgres: naive, row per transaction", lambda: pg_naive(fresh(), naive_pushes), n_naive,
                        repeat, bar, task)], version


# ---- report ------------------------------------------------------------------------------------------
def machine() -> dict:
    return {**harness.machine(), "sqlite": sqlite3.sqlite_version, "psycopg": psycopg.__version__}


def report(results: list[dict]) -> dict:
    table = Table(title="Controller storage ingest, 500-sample pushes (median of runs; "
                        "ratio = ours / this row, same database)")
    for col in ("case", "samples", "samples/s (median)", "runs samples/s", "ours / this", "target"):
        table.add_column(col, justify="left" if col == "case" else "right")
    ours = {r["case"].split(":")[0]: r["median_samples_per_s"] for r in results if ": ours (" in r["case"]}
    targets = {}
    for r in results:
        db, rate = r["case"].split(":")[0], r["median_samples_per_s"]
        r["ours_ratio"] = ours[db] / rate
        verdict = ""
        if r["case"].startswith("sqlite: ours"):
            met = rate >= TARGET_SAMPLES_S
            targets["sqlite_samples_per_s"] = {"median": rate, "target": TARGET_SAMPLES_S, "met": met}
            verdict = f">={TARGET_SAMPLES_S // 1000}k/s {'[green]met' if met else '[red]MISSED'}[/]"
        table.add_row(r["case"], str(r["samples"]), f"{rate:,.0f}",
                      " ".join(f"{x / 1000:.0f}k" for x in r["samples_per_s"]),
                      "1.00" if ": ours (" in r["case"] else f"{r['ours_ratio']:.2f}×", verdict)
    out.print(table)
    return targets


@BENCHMARKS.register("controller-ingest")
def main(samples: Annotated[int, typer.Option(min=500, help="Samples per run for ours and executemany.")] = 100_000,
         naive_samples: Annotated[int, typer.Option(
             min=500, help="Samples per run for the naive SQLite baseline.")] = 20_000,
         naive_pg_samples: Annotated[int, typer.Option(
             min=500, help="Samples per run for the naive PostgreSQL baseline (an fsync per sample).")] = 2_000,
         batch: Annotated[int, typer.Option(min=1, help="Samples per push.")] = 500,
         repeat: Annotated[int, typer.Option(min=1, help="Runs per case, each on a fresh database.")] = 3,
         postgres: Annotated[bool, typer.Option(help="Also measure PostgreSQL (a throwaway server).")] = True,
         json_path: Annotated[Path, typer.Option("--out", help="Where the record goes.")] = DEFAULT_JSON,
         ) -> None:
    missing, throwaway_postgres = _test_postgres()
    why_no_pg = missing() if postgres else "--no-postgres"
    if postgres and why_no_pg:
        err.print(f"PostgreSQL skipped: {why_no_pg}")
    info = machine()
    pushes = make_pushes(samples, batch)
    naive = make_pushes(naive_samples, batch)
    naive_pg = make_pushes(naive_pg_samples, batch)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as bar, \
            tempfile.TemporaryDirectory(prefix="cf-ingest-") as workdir:
        task = bar.add_task("", total=repeat * (3 if why_no_pg else 7))
        results = sqlite_cases(pushes, naive, repeat, Path(workdir), bar, task)
        if not why_no_pg:
            pg_results, info["postgres"] = postgres_cases(pushes, naive_pg, repeat, bar, task, throwaway_postgres)
            results += pg_results
    targets = report(results)
    notes = ["ours and executemany write the same rows; ours also keeps `latest` (one upsert per series per push)",
             "naive baselines run on fewer samples (--naive-samples, --naive-pg-samples): per-row commits are slow",
             "sqlite: WAL, synchronous=NORMAL (no fsync per commit); postgres: defaults (fsync per commit)"]
    if why_no_pg:
        notes.append(f"postgres not measured: {why_no_pg}")
    for note in notes:
        out.print(f"note: {note}")
    data = {"benchmark": "controller_ingest", "machine": info,
            "params": {"samples": samples, "naive_samples": naive_samples, "naive_pg_samples": naive_pg_samples,
                       "batch": batch, "repeat": repeat, "hosts": HOSTS,
                       "series_per_host": len(NAMES) * PEERS * PATHS * 2},
            "results": results, "targets": targets, "notes": notes}
    naive_rate = next((r["median_samples_per_s"] for r in results if r["case"].startswith("sqlite: naive")), None)
    judged = [Target("samples/s into SQLite", t["median"], t["target"], "samples/s", baseline=naive_rate,
                     note="baseline: one INSERT per sample, each its own transaction")
              for t in targets.values()]
    record("controller-ingest", judged, info, data, path=json_path)
    err.print(f"results written to {json_path}")
    if not all(t["met"] for t in targets.values()):
        raise typer.Exit(1)
