"""How many agents the controller serves: simulated agents (controller_scale_load) push realistic
traffic at the default push interval against 1 and 3 replicas on loopback, on SQLite (one replica:
one process owns the file) and on PostgreSQL (a throwaway server, tests/pg.py, fsync on).

For each setup the number of hosts doubles from --start until p99 push latency passes 250 ms or a
push fails (or --max-hosts): it reports sustained pushes/s, p99 latency, and database growth per
host-day at each step. Then, on 3 PostgreSQL replicas under load, the lease holder is killed
(SIGKILL): how long until another replica holds the lease (detectors resumed), and whether every
event a replica acknowledged is stored. The generator shares the machine's cores with the
controllers and the database: its own CPU is part of what limits the figures here.

    clockfabric bench controller-scale [--start 50] [--max-hosts 10000] [--step-s 10] [--no-postgres]
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import httpx
import psycopg
import typer
from rich.console import Console

from clockfabric.bench import harness
from clockfabric.bench.controller_ingest import _test_postgres
from clockfabric.bench.controller_scale_load import Counts, SimHost, run_load
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, record
from clockfabric.lab import process

P99_BAR_S, TARGET_HOSTS, INTERVAL_S = 0.250, 10_000, 1.0  # agent.config's update_s: the default push interval
TOKEN = "s" * 32
BASE_PORT = 7640
_ports = iter(range(BASE_PORT, BASE_PORT + 1000, 3))  # each set of replicas on fresh ports
out, err = Console(), Console(stderr=True)


class Replicas:
    """`clockfabric controller` processes on one database, on loopback ports."""

    def __init__(self, db: str, n: int, workdir: Path):
        self.db, self.workdir = db, workdir
        (workdir / "token").write_text(TOKEN)
        self.base = next(_ports)
        self.urls = [f"http://127.0.0.1:{self.base + i}" for i in range(n)]
        self.procs = [self._start(i) for i in range(n)]
        for url in self.urls:
            self._wait(url)

    def _start(self, i: int):
        argv = [sys.executable, "-m", "clockfabric.cli", "controller", "--db", self.db, "--listen",
                f"127.0.0.1:{self.base + i}", "--token-file", str(self.workdir / "token"), "--enroll-unknown"]
        return process.spawn(argv, log=self.workdir / f"replica{self.base + i}.log")

    def _wait(self, url: str, timeout_s: float = 60.0) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        logs = "".join(p.read_text()[-500:] for p in self.workdir.glob("replica*.log"))
        raise RuntimeError(f"replica {url} did not start: {logs}")

    def stop(self) -> None:
        process.stop(self.procs, grace_s=3)


def db_bytes(db: str) -> int:
    if db.startswith("postgresql://"):
        with psycopg.connect(db) as conn:
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
            return int(row[0]) if row else 0
    return sum(p.stat().st_size for p in Path(db).parent.glob(Path(db).name + "*"))


def step(db: str, urls: list[str], n: int, seconds: float) -> dict:
    hosts = [SimHost(f"sim{i:05d}", n, urls) for i in range(n)]
    before = db_bytes(db)
    t0 = time.perf_counter()
    counts: Counts = asyncio.run(run_load(hosts, TOKEN, seconds, INTERVAL_S))
    wall = time.perf_counter() - t0
    grown = db_bytes(db) - before
    lat = sorted(counts.latencies_s)
    p99 = lat[int(0.99 * (len(lat) - 1))] if lat else None
    return {"hosts": n, "seconds": round(wall, 2), "pushes_ok": counts.ok, "errors": counts.errors,
            "late": counts.late, "skipped": counts.skipped, "pushes_per_s": round(counts.ok / wall, 1),
            "p50_ms": round(statistics.median(lat) * 1e3, 1) if lat else None,
            "p99_ms": round(p99 * 1e3, 1) if p99 is not None else None,
            "db_bytes_per_host_day": round(grown / (n * seconds) * 86_400) if grown > 0 else None}


def broken(r: dict) -> bool:
    return r["p99_ms"] is None or r["p99_ms"] > P99_BAR_S * 1e3 or r["errors"] > 0 or r["late"] > 0 or r["skipped"] > 0


def ramp(setup: str, db: str, replicas: int, start: int, max_hosts: int, step_s: float, workdir: Path) -> list[dict]:
    reps = Replicas(db, replicas, workdir)
    steps = []
    try:
        n = start
        while n <= max_hosts:
            r = {"setup": setup, **step(db, reps.urls, n, step_s)}
            steps.append(r)
            err.print(f"{setup}: {r}")
            if broken(r):
                break
            n *= 2
    finally:
        reps.stop()
    return steps


def leader_pid(db: str) -> tuple[int, int] | None:
    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT holder, generation FROM leases WHERE name = 'controller'").fetchone()
    return (int(row[0].split(":")[1]), int(row[1])) if row else None


def handover_s(db: str, generation: int, timeout_s: float = 30.0) -> float:
    """Seconds until a replica holds a newer generation of the lease than `generation`."""
    t0 = time.monotonic()
    while (now := leader_pid(db)) is None or now[1] == generation:
        if time.monotonic() - t0 > timeout_s:
            return float("inf")
        time.sleep(0.1)
    return round(time.monotonic() - t0, 2)


def failover(db: str, hosts: int, workdir: Path) -> dict:
    """3 replicas under load; SIGKILL the lease holder halfway; handover time and events kept."""
    reps = Replicas(db, 3, workdir)
    sims = [SimHost(f"fo{i:05d}", hosts, reps.urls) for i in range(hosts)]
    result: dict = {}

    async def load_and_kill() -> Counts:
        task = asyncio.create_task(run_load(sims, TOKEN, 20, INTERVAL_S))
        await asyncio.sleep(8)
        found = await asyncio.to_thread(leader_pid, db)
        assert found, "no replica holds the lease"
        pid, generation = found
        os.kill(pid, signal.SIGKILL)
        result["handover_s"] = await asyncio.to_thread(handover_s, db, generation)
        return await task

    try:
        counts = asyncio.run(load_and_kill())
        with psycopg.connect(db) as conn:
            rows = conn.execute("SELECT host || ':' || boot, count(*) FROM events GROUP BY host, boot").fetchall()
        stored: dict[str, int] = dict(rows)
        lost = sum(max(0, n - stored.get(f"{h}:{b}", 0)) for (h, b), n in counts.acked.items())
        result.update(hosts=hosts, acked_events=sum(counts.acked.values()), lost_events=lost,
                      push_errors=counts.errors)
    finally:
        reps.stop()
    return result


@BENCHMARKS.register("controller-scale", help="Simulated agents against 1 and 3 controller replicas, "
                                              "SQLite and PostgreSQL: pushes/s, p99, growth, failover.")
def main(start: Annotated[int, typer.Option(min=1, help="Hosts at the first step (doubled each step).")] = 50,
         max_hosts: Annotated[int, typer.Option(min=1, help="Stop doubling here.")] = TARGET_HOSTS,
         step_s: Annotated[float, typer.Option(min=2, help="Seconds of load per step.")] = 10.0,
         failover_hosts: Annotated[int, typer.Option(min=1, help="Hosts pushing while the leader is killed.")] = 100,
         postgres: Annotated[bool, typer.Option(help="Also PostgreSQL, 1 and 3 replicas, and failover.")] = True,
         json_path: Annotated[Path, typer.Option("--out")] = RESULTS / "controller-scale.json") -> None:
    missing, throwaway_postgres = _test_postgres()
    why = missing() if postgres else "--no-postgres"
    info = harness.machine()
    steps: list[dict] = []
    fo: dict = {}
    with tempfile.TemporaryDirectory(prefix="cf-scale-") as tmp:
        work = Path(tmp)
        steps += ramp("sqlite x1", str(work / "c.db"), 1, start, max_hosts, step_s, work)
        if not why:
            with throwaway_postgres(fsync=True) as server:
                for n, name in ((1, "pg1"), (3, "pg3")):
                    steps += ramp(f"postgres x{n}", server.create_database(name), n, start, max_hosts, step_s, work)
                fo = failover(server.create_database("fo"), failover_hosts, work)
    best = {s: max((r["hosts"] for r in steps if r["setup"] == s and not broken(r)), default=0)
            for s in dict.fromkeys(r["setup"] for r in steps)}
    pg3 = [r for r in steps if r["setup"] == "postgres x3" and not broken(r)]
    rate = max((r["pushes_per_s"] for r in pg3), default=0.0)
    notes = [f"largest fleet within p99 <= {P99_BAR_S * 1e3:.0f} ms and no errors, per setup: {best}",
             f"a 100,000-host fleet at {INTERVAL_S:.0f} s pushes needs 100,000 pushes/s: "
             + (f"{100_000 / rate:.0f}x what 3 replicas on this machine sustained ({rate:.0f}/s)" if rate else
                "not measured")]
    if why:
        notes.append(f"postgres not measured: {why}")
    for note in notes:
        out.print(f"note: {note}")
    targets = [Target("hosts within p99 250 ms, 3 replicas on PostgreSQL", best.get("postgres x3"), TARGET_HOSTS,
                      "hosts")]
    if fo:
        targets.append(Target("leader handover after SIGKILL", fo["handover_s"], 10.0, "s", better="lower"))
    data = {"benchmark": "controller_scale", "machine": info, "steps": steps, "failover": fo, "notes": notes,
            "params": {"start": start, "max_hosts": max_hosts, "step_s": step_s, "interval_s": INTERVAL_S}}
    record("controller-scale", targets, info, data, path=json_path)
    err.print(f"results written to {json_path}")
