"""How many agents the series path holds: simulated agents write what a real agent writes (the
same series as `controller-scale`'s load, 167 samples) every 10 s, through the vmauth gate to the
victoria-metrics the controller starts, stepping up towards 10,000 agents.

The load generator is asyncio over plain keep-alive connections with each host's request built
once (no timestamps in the lines: the engine stamps what it takes), since Python, not the engine,
is what runs out first on a small machine. Each step records samples sent, ingested (the engine's
own count) and dropped, CPU per host-second for the engine, the gate and the generator apart,
disk bytes a sample, the latency of `Series.latest` of one OWD statistic (what the heatmap
reads), and one tick of the detectors' feed as it reads now (one export of every sample since
the last tick) against the feed as it read before (each name's newest, two queries a name).
The baseline is the old SQL store's, measured at 570e30a on this
machine (docs/deploy.md): 4.6 + 1.5 ms of controller and database CPU a push of 167 samples,
173 bytes a sample on PostgreSQL.

    clockfabric bench fleet-scale [--hosts 1000,3000,10000] [--step-s 30] [--out PATH]
"""

from __future__ import annotations

import asyncio
import math
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console
from rich.table import Table

from clockfabric.auth.credential import host_token
from clockfabric.bench import harness
from clockfabric.bench.controller.scale_load import samples
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, record
from clockfabric.controller.series.feed import DETECTOR_SAMPLES, OVERLAP_NS, SampleFeed
from clockfabric.controller.series.gate import IMPORT_PATH
from clockfabric.controller.series.path import SeriesPath
from clockfabric.controller.series.read import SeriesError
from clockfabric.serieswire import series_name

out = Console()
TOKEN = "fleet-scale-" + "x" * 20
DEFAULT_JSON = RESULTS / "fleet-scale.json"
CADENCE_S = 10.0
CONNECTIONS = 64
BASE_CPU_HOST_S = (4.6e-3 + 1.5e-3) / CADENCE_S  # the SQL store's CPU a host-second at this cadence
BASE_BYTES = 173.0
TICK_NS = 10**9  # the controller's tick: the feed reads what came since the last one


def request(host: str, hosts: int, port: int) -> bytes:
    """A host's write, whole: headers and its lines, as the agent sends it."""
    lines = []
    for s in samples(host, hosts):
        labels = ",".join(f'{k}="{v}"' for k, v in sorted((s.get("labels") or {}).items()))
        lines.append(f"{series_name(s['name'])}{{{labels}}} {s['value']!r}")
    body = ("\n".join(lines) + "\n").encode()
    head = (f"POST {IMPORT_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {host_token(TOKEN, host)}\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


async def _worker(port: int, queue: asyncio.Queue, counts: dict[str, int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    while True:
        req = await queue.get()
        try:
            writer.write(req)
            status = (await reader.readline()).split(b" ", 2)[1]
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            counts["ok" if status == b"204" else "refused"] += 1
        except (OSError, IndexError, asyncio.IncompleteReadError):
            counts["failed"] += 1
            writer.close()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        finally:
            queue.task_done()


async def _load(port: int, reqs: list[bytes], seconds: float) -> dict[str, int]:
    """Each host's request once a cadence, at its own offset in it (open loop), for `seconds`."""
    counts = {"ok": 0, "refused": 0, "failed": 0, "late": 0, "sent": 0}
    queue: asyncio.Queue = asyncio.Queue()
    workers = [asyncio.create_task(_worker(port, queue, counts)) for _ in range(CONNECTIONS)]
    start = time.monotonic()
    n = len(reqs)
    k = 0
    while (due := start + k * CADENCE_S / n) < start + seconds:
        wait = due - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        elif wait < -CADENCE_S:
            counts["late"] += 1
        queue.put_nowait(reqs[k % n])
        counts["sent"] += 1
        k += 1
    await asyncio.wait_for(queue.join(), timeout=60)
    for w in workers:
        w.cancel()
    return counts


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _rows(url: str) -> int:
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith('vm_rows_inserted_total{type="prometheus"}'))


def _disk(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.suffix != ".log")


def step(series: SeriesPath, hosts: int, seconds: float) -> dict:
    assert series.engine is not None and series.gate is not None and series.series is not None
    engine, gate = series.engine.proc, series.gate.child.proc
    assert engine is not None and gate is not None
    names = [f"sim{i:05d}" for i in range(hosts)]
    series.allow(names)
    time.sleep(1.0)  # vmauth rereads its users on SIGHUP
    reqs = [request(h, hosts, series.write_port) for h in names]
    per_request = reqs[0].count(b"\n") - 5  # the lines, less the header lines
    rows0, eng0, gate0, own0 = _rows(series.url), _cpu_s(engine.pid), _cpu_s(gate.pid), _own_cpu_s()
    t0 = time.monotonic()
    counts = asyncio.run(_load(series.write_port, reqs, seconds))
    wall = time.monotonic() - t0
    t_end = time.time_ns()  # the engine stamped every sample before this: the feed's ticks read up to it
    eng, gated, own = _cpu_s(engine.pid) - eng0, _cpu_s(gate.pid) - gate0, _own_cpu_s() - own0
    time.sleep(3.0)  # the engine's insert buffers
    ingested = _rows(series.url) - rows0
    sent = counts["ok"] * per_request
    lat: list[float] = []
    found = 0
    for _ in range(5):
        q0 = time.perf_counter()
        try:
            found = len(series.series.latest("owd_p50_ns"))
        except SeriesError:  # past the reader's budget, as a route would be refused
            lat.append(math.inf)
            continue
        lat.append(time.perf_counter() - q0)
    feed_s, fed = _timed(lambda: len(SampleFeed(series.series, since_ns=t_end - TICK_NS).new(t_end)))
    by_name_s, _ = _timed(lambda: [series.series.latest(name, since_ns=t_end - TICK_NS - OVERLAP_NS, now_ns=t_end)
                                   for name in DETECTOR_SAMPLES])
    host_s = hosts * wall
    return {"hosts": hosts, "seconds": round(wall, 1), **counts, "samples_sent": counts["sent"] * per_request,
            "samples_acked": sent, "samples_ingested": ingested,
            "samples_dropped": counts["sent"] * per_request - ingested,
            "engine_cpu_us_host_s": eng / host_s * 1e6, "gate_cpu_us_host_s": gated / host_s * 1e6,
            "generator_cpu_us_host_s": own / host_s * 1e6, "latest_series": found,
            "latest_p50_s": _finite(sorted(lat)[2]), "latest_max_s": _finite(max(lat)),
            "feed_tick_s": _finite(feed_s), "feed_samples": fed, "feed_by_name_s": _finite(by_name_s)}


def _timed(read) -> tuple[float, object]:
    """Seconds `read()` took and what it gave; infinity where the engine refused it past the budget."""
    t0 = time.perf_counter()
    try:
        got = read()
    except SeriesError:
        return math.inf, None
    return time.perf_counter() - t0, got


def _finite(x: float) -> float | None:
    """None for a read refused past its budget (JSON has no infinity)."""
    return x if math.isfinite(x) else None


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


@BENCHMARKS.register("fleet-scale")
def main(hosts: Annotated[str, typer.Option(help="The steps: agents, comma-separated.")] = "1000,3000,10000",
         step_s: Annotated[float, typer.Option(min=CADENCE_S)] = 30.0,
         json_path: Annotated[Path, typer.Option("--out", help="Where the record goes.")] = DEFAULT_JSON) -> None:
    """Simulated agents through the series gate to the engine, stepping up to --hosts."""
    steps = [int(h) for h in hosts.split(",")]
    facts = harness.machine()
    rows = []
    with tempfile.TemporaryDirectory(prefix="cf-fleet-scale-") as tmp:
        series = SeriesPath(data_dir=Path(tmp), fleet_token=TOKEN)
        series.start()
        try:
            for n in steps:
                rows.append(step(series, n, step_s))
                out.print(rows[-1])
            httpx.get(series.url + "/internal/force_flush", timeout=60)
            time.sleep(2.0)
            total = _rows(series.url)
            disk = _disk(Path(tmp) / "engine")
        finally:
            series.stop()
    top = rows[-1]
    bytes_a_sample = disk / max(total, 1)
    cpu = (top["engine_cpu_us_host_s"] + top["gate_cpu_us_host_s"]) / 1e6
    targets = [
        Target("disk a sample", round(bytes_a_sample, 2), 2.0, "B", "lower", BASE_BYTES,
               note="data and index, all steps together; the index is per series and day"),
        Target("engine + gate CPU a host-second, below the SQL store's", round(BASE_CPU_HOST_S / cpu, 1), 10.0, "x",
               baseline=1.0, note="the SQL store's: (4.6 + 1.5 ms a push) / 10 s, at 570e30a; the controller's "
                                  "event pushes are not in either side here"),
        Target(f"samples dropped at {top['hosts']} agents", float(top["samples_dropped"]), 0.0, "", "lower"),
        Target(f"Series.latest of one OWD statistic at {top['hosts']} agents",
               None if top["latest_p50_s"] is None else round(top["latest_p50_s"], 3), 0.5, "s", "lower",
               note="None: refused past the reader's 2 s budget"),
    ]
    feed_over = [r for r in rows if r["feed_tick_s"] is not None and r["feed_tick_s"] <= TICK_NS / 1e9]
    held = max(feed_over, key=lambda r: r["hosts"]) if feed_over else None
    targets.append(Target(f"detectors' feed, one tick, at {top['hosts']} agents", _ms(top["feed_tick_s"]),
                          TICK_NS / 1e9, "s", "lower", _ms(top["feed_by_name_s"]),
                          note=("every sample since the last tick in one export; baseline: each name's newest, "
                                "two queries a name (None: refused past the 2 s budget); held within the tick up "
                                f"to {held['hosts'] if held else 0} agents")))
    record("fleet-scale", targets, facts, {"steps": rows, "disk_bytes": disk, "rows": total},
           {"agents": top["hosts"], "bytes_a_sample": round(bytes_a_sample, 2)}, json_path)
    table = Table(title="fleet-scale")
    for col in ("agents", "sent", "ingested", "dropped", "engine us/host-s", "gate us/host-s", "generator us/host-s",
                "latest p50", "feed tick", "feed by name"):
        table.add_column(col)
    for r in rows:
        table.add_row(str(r["hosts"]), str(r["samples_sent"]), str(r["samples_ingested"]), str(r["samples_dropped"]),
                      f"{r['engine_cpu_us_host_s']:.1f}", f"{r['gate_cpu_us_host_s']:.1f}",
                      f"{r['generator_cpu_us_host_s']:.1f}",
                      *[("over budget" if r[k] is None else f"{r[k] * 1e3:.0f} ms")
                        for k in ("latest_p50_s", "feed_tick_s", "feed_by_name_s")])
    out.print(table)
    out.print(harness.targets_table("fleet-scale", targets))
