"""How many agents the controller serves: simulated agents (controller_scale_load) push realistic
traffic at the default push interval against 1 and 3 replicas on loopback, on SQLite (one replica:
one process owns the file) and on PostgreSQL (a throwaway server, tests/pg.py, fsync on).

For each setup the number of hosts doubles from --start until p99 push latency passes 250 ms or a
push fails (or --max-hosts): it reports sustained pushes/s, p99 latency, and database growth per
host-day at each step. Then, on 3 PostgreSQL replicas under load, the lease holder is killed
(SIGKILL): how long until another replica holds the lease (detectors resumed), and whether every
event a replica acknowledged is stored. The generator shares the machine's cores with the
controllers and the database: its own CPU is part of what limits the figures here.

Each step also reports the CPU the controllers and the database server used per push, and from it
pushes a core: on a machine shared with other work (and with the generator) this, not latency, is
the figure that carries to other machines; the notes size a 100,000-host fleet from it.

    clockfabric bench controller-scale [--start 50] [--max-hosts 10000] [--step-s 10] [--no-postgres]
        [--baseline OLD.json]
"""

from __future__ import annotations

import asyncio
import json
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
from clockfabric.bench.controller.scale_load import Counts, SimHost, run_load
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, record
from clockfabric.lab import process

P99_BAR_S, TARGET_HOSTS, INTERVAL_S = 0.250, 10_000, 1.0  # agent.config's update_s: the default push interval
TOKEN = "s" * 32
BASE_PORT = 7640
_ports = iter(range(BASE_PORT, BASE_PORT + 1000, 3))  # each set of replicas on fresh ports
out, err = Console(), Console(stderr=True)


class Replicas:
    """`clockfabric controller` processes on one database, on loopback ports."""

    def __init__(self, db: str, n: int, workdir: Path, options: tuple[str, ...] = ()):
        """`options`: more of `clockfabric controller`'s options, for every replica."""
        self.db, self.workdir, self.options = db, workdir, options
        (workdir / "token").write_text(TOKEN)
        self.base = next(_ports)
        self.urls = [f"http://127.0.0.1:{self.base + i}" for i in range(n)]
        self.procs = [self._start(i) for i in range(n)]
        for url in self.urls:
            self._wait(url)

    def _start(self, i: int):
        argv = [sys.executable, "-m", "clockfabric.cli", "controller", "--db", self.db, "--listen",
                f"127.0.0.1:{self.base + i}", "--token-file", str(self.workdir / "token"), "--enroll-unknown",
                *self.options]
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

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        process.stop(self.procs, grace_s=3)


def db_bytes(db: str) -> int:
    if db.startswith("postgresql://"):
        with psycopg.connect(db) as conn:
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
            return int(row[0]) if row else 0
    return sum(p.stat().st_size for p in Path(db).parent.glob(Path(db).name + "*"))


def cpu_s(pids: list[int]) -> float:
    """CPU seconds the processes used (user and system), with their children that ended."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pids: list[int]) -> float | None:
    """The largest peak resident set (VmHWM) among the processes: what a memory limit must allow."""
    peaks = []
    for pid in pids:
        try:
            line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmHWM:"))
        except (OSError, StopIteration):
            continue
        peaks.append(int(line.split()[1]) / 1024)
    return round(max(peaks), 1) if peaks else None


def server_pids(postmaster: int | None) -> list[int]:
    """The database server's processes: the postmaster and its backends (none for SQLite)."""
    return [] if postmaster is None else [postmaster, *process.children(postmaster)]


def step(db: str, reps: Replicas, n: int, seconds: float, postmaster: int | None) -> dict:
    """One load step; CPU per push is what bounds pushes per core, whatever else shares the machine."""
    hosts = [SimHost(f"sim{i:05d}", n, reps.urls) for i in range(n)]
    before = db_bytes(db)
    ctrl0, db0 = cpu_s(reps.pids), cpu_s(server_pids(postmaster))
    t0 = time.perf_counter()
    counts: Counts = asyncio.run(run_load(hosts, TOKEN, seconds, INTERVAL_S))
    wall = time.perf_counter() - t0
    ctrl_ms = (cpu_s(reps.pids) - ctrl0) / max(counts.ok, 1) * 1e3
    db_ms = (cpu_s(server_pids(postmaster)) - db0) / max(counts.ok, 1) * 1e3
    grown = db_bytes(db) - before
    lat = sorted(counts.latencies_s)
    p99 = lat[int(0.99 * (len(lat) - 1))] if lat else None
    return {"hosts": n, "seconds": round(wall, 2), "pushes_ok": counts.ok, "errors": counts.errors,
            "late": counts.late, "skipped": counts.skipped, "pushes_per_s": round(counts.ok / wall, 1),
            "p50_ms": round(statistics.median(lat) * 1e3, 1) if lat else None,
            "p99_ms": round(p99 * 1e3, 1) if p99 is not None else None,
            "db_bytes_per_host_day": round(grown / (n * seconds) * 86_400) if grown > 0 else None,
            "controller_cpu_ms_per_push": round(ctrl_ms, 2), "db_cpu_ms_per_push": round(db_ms, 2),
            "controller_peak_rss_mb": peak_rss_mb(reps.pids),
            "pushes_per_core_s": round(1e3 / (ctrl_ms + db_ms)) if ctrl_ms + db_ms > 0 else None}


def broken(r: dict) -> bool:
    return r["p99_ms"] is None or r["p99_ms"] > P99_BAR_S * 1e3 or r["errors"] > 0 or r["late"] > 0 or r["skipped"] > 0


def ramp(setup: str, db: str, replicas: int, start: int, max_hosts: int, step_s: float, workdir: Path,
         postmaster: int | None = None) -> list[dict]:
    reps = Replicas(db, replicas, workdir)
    steps = []
    try:
        n = start
        while n <= max_hosts:
            r = {"setup": setup, **step(db, reps, n, step_s, postmaster)}
            steps.append(r)
            err.print(f"{setup}: {r}")
            if broken(r):
                break
            n *= 2
    finally:
        reps.stop()
    return steps


def postmaster(server) -> int | None:
    """The throwaway server's (tests/pg.py) postmaster, from its data directory's postmaster.pid."""
    try:
        return int((Path(server.socket_dir) / "data" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


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


def busiest(steps: list[dict]) -> dict[str, dict]:
    """Each setup's step with the most hosts that held the bar and has CPU figures: the one with the
    least idle time in its CPU per push."""
    out: dict[str, dict] = {}
    for r in steps:
        if not broken(r) and r.get("pushes_per_core_s") and r["hosts"] > out.get(r["setup"], {}).get("hosts", 0):
            out[r["setup"]] = r
    return out


def per_core_targets(steps: list[dict], baseline: Path | None) -> list[Target]:
    """Pushes a core (controllers' and database's CPU) per setup, against what the bar needs on this
    machine's cores; `baseline`: this bench's record from another commit, for the same figure there."""
    base = busiest(json.loads(baseline.read_text())["report"]["steps"]) if baseline else {}
    bar = TARGET_HOSTS / INTERVAL_S / (os.cpu_count() or 1)
    return [Target(f"pushes a core (controllers + database CPU), {setup}", top["pushes_per_core_s"], bar, "pushes/s",
                   baseline=base.get(setup, {}).get("pushes_per_core_s"),
                   note=f"at {top['hosts']} hosts" + (f"; baseline {json.loads(baseline.read_text())['commit']}"
                                                      if baseline else ""))
            for setup, top in busiest(steps).items()]


def sizing(steps: list[dict], hosts: int = 100_000, raw_days: int = 7) -> list[str]:
    """What `hosts` need, from each setup's CPU per push (its busiest step that held the bar: the least
    idle time in the figure) and database growth per host-day (its longest-filled step)."""
    out = []
    for setup, top in busiest(steps).items():
        pushes_s = hosts / INTERVAL_S
        ctrl, dbc = top["controller_cpu_ms_per_push"], top["db_cpu_ms_per_push"]
        line = (f"{setup}: {ctrl} ms controller + {dbc} ms database CPU a push ({top['pushes_per_core_s']} pushes/s "
                f"a core): {hosts:,} hosts need {pushes_s * ctrl / 1e3:.0f} controller cores"
                + (f" and {pushes_s * dbc / 1e3:.0f} database cores" if dbc else ""))
        if top["db_bytes_per_host_day"]:
            line += (f"; {top['db_bytes_per_host_day'] / 1e9:.2f} GB a host-day, {raw_days} days raw: "
                     f"{top['db_bytes_per_host_day'] * hosts * raw_days / 1e12:.0f} TB")
        out.append(line)
    return out


@BENCHMARKS.register("controller-scale")
def main(start: Annotated[int, typer.Option(min=1, help="Hosts at the first step (doubled each step).")] = 50,
         max_hosts: Annotated[int, typer.Option(min=1, help="Stop doubling here.")] = TARGET_HOSTS,
         step_s: Annotated[float, typer.Option(min=2, help="Seconds of load per step.")] = 10.0,
         failover_hosts: Annotated[int, typer.Option(min=1, help="Hosts pushing while the leader is killed.")] = 100,
         postgres: Annotated[bool, typer.Option(help="Also PostgreSQL, 1 and 3 replicas, and failover.")] = True,
         json_path: Annotated[Path, typer.Option("--out")] = RESULTS / "controller-scale.json",
         baseline: Annotated[Path | None, typer.Option(
             exists=True, dir_okay=False,
             help="This bench's record from another commit: its pushes a core become the baselines.")] = None,
         ) -> None:
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
                    steps += ramp(f"postgres x{n}", server.create_database(name), n, start, max_hosts, step_s, work,
                                  postmaster(server))
                fo = failover(server.create_database("fo"), failover_hosts, work)
    best = {s: max((r["hosts"] for r in steps if r["setup"] == s and not broken(r)), default=0)
            for s in dict.fromkeys(r["setup"] for r in steps)}
    pg3 = [r for r in steps if r["setup"] == "postgres x3" and not broken(r)]
    rate = max((r["pushes_per_s"] for r in pg3), default=0.0)
    notes = [f"largest fleet within p99 <= {P99_BAR_S * 1e3:.0f} ms and no errors, per setup: {best}",
             f"a 100,000-host fleet at {INTERVAL_S:.0f} s pushes needs 100,000 pushes/s: "
             + (f"{100_000 / rate:.0f}x what 3 replicas on this machine sustained ({rate:.0f}/s)" if rate else
                "not measured"), *sizing(steps)]
    if why:
        notes.append(f"postgres not measured: {why}")
    for note in notes:
        out.print(f"note: {note}")
    targets = [Target("hosts within p99 250 ms, 3 replicas on PostgreSQL", best.get("postgres x3"), TARGET_HOSTS,
                      "hosts")]
    targets += per_core_targets(steps, baseline)
    if fo:
        targets.append(Target("leader handover after SIGKILL", fo["handover_s"], 10.0, "s", better="lower"))
    data = {"benchmark": "controller_scale", "machine": info, "steps": steps, "failover": fo, "notes": notes,
            "params": {"start": start, "max_hosts": max_hosts, "step_s": step_s, "interval_s": INTERVAL_S}}
    record("controller-scale", targets, info, data, path=json_path)
    err.print(f"results written to {json_path}")


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
