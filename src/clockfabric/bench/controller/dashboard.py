"""`clockfabric bench dashboard`: the dashboard's scale targets on a synthetic fleet (bench.
dashboard_fleet): every API route a view reads answers within 200 ms at the 95th percentile,
and, in headless Chromium where installed, each view's first render is done within 1 s and a
pushed event shows in the events view within 1 s.

The controller runs as it does in production (uvicorn, SQLite, the detectors replayed from the
database) on loopback; its clock is set to the moment the database was generated, so the
synthetic week ends "now" however long the generation took. The engine's clock is not: while the
routes are timed, the fleet's newest round (link states, every path's delays) is written again
every REWRITE_S, as its agents would, so that a path's newest delay is always within the
reader's look-back.
"""

from __future__ import annotations

import random
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import httpx
import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from clockfabric.auth.credential import host_token
from clockfabric.bench import chromium, harness
from clockfabric.bench.controller.dashboard_fleet import Shape, engine_sink, generate, history, latest_round
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, record
from clockfabric.controller.dashboard.data import HEATMAP_MAX_AGE_S
from clockfabric.controller.dashboard.fresh import SHARE
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.monitor import Monitor
from clockfabric.controller.series.path import SeriesPath
from clockfabric.controller.server import Listen, server, start_in_thread
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.serieswire import line

ROUTE_P95_MS, RENDER_S = 200.0, 1.0
RENDER_GIVE_UP_S = 20.0
BASELINE = "baseline: every OWD path"
FIRST_OF_SECOND = "owd, first of its second"  # a heatmap no request of the last second read
LAG_S, LAG_PUSHES, MARK = 1.0, 10, "dashboard_mark"  # the live-update bar; pushes timed; their events' kind
TOKEN = "b" * 32
VIEWS = ("fleet", "fabric", "owd", "events", "audit", "jobs")
REWRITE_S = 30.0  # the newest round written again this often while the routes are timed
DEFAULT_JSON = RESULTS / "dashboard.json"
out = Console()


def routes(now_ns: int) -> list[tuple[str, str, dict]]:
    """(view, path, parameters): what each view reads on a render, as its script asks; last, the
    baseline: the general API's every path of the OWD matrix, which the heatmap read before."""
    hour, day = now_ns - 3600 * 10**9, now_ns - 24 * 3600 * 10**9
    job = "train-000"
    return [("fleet", "/api/v1/hosts", {}), ("fleet", "/api/v1/alerts", {"open_only": "true", "limit": 1000}),
            ("fleet", "/api/v1/events", {"since_ns": hour, "limit": 1000}),
            ("fabric", "/api/v1/fabric", {}), ("fabric", "/api/v1/paths", {}),
            ("owd", "/api/v1/dashboard/owd", {"stat": "p50"}),
            (FIRST_OF_SECOND, "/api/v1/dashboard/owd", {"stat": "p50"}),
            ("owd, a block opened", "/api/v1/dashboard/owd", {"stat": "p99", "src_block": 0, "dst_block": 1}),
            ("events", "/api/v1/events", {"since_ns": hour, "limit": 1000}),
            ("events", "/api/v1/alerts", {"since_ns": day, "limit": 1000}),
            ("audit", "/api/v1/audits", {"limit": 1000}), ("audit", "/api/v1/audits/1", {}),
            ("jobs", "/api/v1/jobs", {"limit": 1000}), ("jobs", f"/api/v1/jobs/{job}", {}),
            ("jobs", f"/api/v1/jobs/{job}/why", {"since": "5m"}),
            ("jobs", "/api/v1/dashboard/job-series", {"jobid": job, "since": "5m"}),
            (BASELINE, "/api/v1/owd", {"stat": "p50"})]


def rewrite(url: str, bodies: list[bytes], stop: threading.Event) -> None:
    """`bodies` (lines with no time: the engine stamps them as it takes them) written again every
    REWRITE_S until `stop`: built once, so the routes timed beside it share the interpreter with
    no more than an HTTP client's sends."""
    with httpx.Client(base_url=url, timeout=60) as client:
        while not stop.wait(REWRITE_S):
            for b in bodies:
                client.post("/api/v1/import/prometheus", content=b).raise_for_status()


def newest_round(shape: Shape) -> list[bytes]:
    """The fleet's newest round (`latest_round`) as import bodies of lines with no time."""
    rows = latest_round(shape.topology(), shape, random.Random(shape.seed), 0)
    return ["".join(line(s.name, s.value, s.labels, None, host=s.host) + "\n" for s in rows[i:i + 50_000]).encode()
            for i in range(0, len(rows), 50_000)]


def time_routes(url: str, now_ns: int, repeats: int) -> list[dict]:
    """Each route `repeats` times back to back; FIRST_OF_SECOND's after a pause each, so that none
    finds the heatmap's pairs of the last second (one open page asks once a second, and finds none).
    A heatmap answer says how long the reading it drew from took (`read_s`): where that is long,
    the route serves it while the next is read, so the readings are kept apart (`reads_ms`, each
    reading once, known by when it began)."""
    rows = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as client:
        for view, path, params in routes(now_ns):
            ms, size, reads = [], 0, {}
            for _ in range(repeats):
                if view == FIRST_OF_SECOND:
                    time.sleep(HEATMAP_MAX_AGE_S + 0.05)
                t0 = time.perf_counter()
                r = client.get(path, params=params)
                ms.append((time.perf_counter() - t0) * 1e3)
                size = len(r.content)
                if r.status_code != 200:
                    raise RuntimeError(f"{path} answered {r.status_code}: {r.text[:200]}")
                if view == FIRST_OF_SECOND:
                    found = r.json()
                    reads[round(time.time() - found["age_s"], 1)] = found["read_s"] * 1e3
            rows.append({"view": view, "route": path, "p50_ms": statistics.median(ms),
                         "p95_ms": float(np.percentile(ms, 95)), "bytes": size, "samples_ms": ms,
                         **({"reads_ms": list(reads.values())} if reads else {})})
    return rows


def time_page(url: str, repeats: int, push: Callable[[int], None], shots: Path | None = None) -> dict | None:
    """In headless Chromium: seconds from asking for each view (a fresh page load) to its first render
    with data ("renders"), and from pushing an event to seeing it in the events view ("lag_s"); None
    without Debian's chromium and chromium-driver, or selenium. `push(seq)` pushes one marked event.
    `shots`: also save the heatmap's blocks, and one block opened, there (1280x800)."""
    if not chromium.available():
        return None
    try:
        driver = chromium.driver()
    except ImportError:  # selenium is a test extra
        return None
    found: dict[str, list[float]] = {v: [] for v in VIEWS}
    try:
        driver.get(f"{url}/dashboard/")
        driver.execute_script("sessionStorage.setItem('clockfabric.token', arguments[0])", TOKEN)
        for _ in range(repeats):
            for view in VIEWS:
                driver.get("about:blank")
                t0 = time.perf_counter()
                driver.get(f"{url}/dashboard/#{view}")
                until(driver, t0, "const v = document.getElementById('view'); return v.dataset.view === arguments[0]"
                      " && v.dataset.rendered !== undefined && v.firstElementChild !== null", view)
                found[view].append(time.perf_counter() - t0)
        if shots is not None:
            heatmap_shots(driver, url, shots)
        driver.get("about:blank")
        driver.get(f"{url}/dashboard/#events")
        until(driver, time.perf_counter(), "return document.querySelector('#timeline tr') !== null")
        lags = []
        for seq in range(1, LAG_PUSHES + 1):
            t0 = time.perf_counter()  # before the push is sent: the lag from receipt, and the push's own time
            push(seq)
            until(driver, t0, "return document.querySelectorAll("
                  f"'#timeline tr[data-kind=\"{MARK}\"]').length >= arguments[0]", seq)
            lags.append(time.perf_counter() - t0)
            time.sleep(0.3)  # apart, so each push is its own change
        errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        driver.quit()
    return {"renders": found, "lag_s": lags, "console_errors": errors}


def heatmap_shots(driver, url: str, where: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    driver.get("about:blank")
    driver.get(f"{url}/dashboard/#owd")
    until(driver, time.perf_counter(), "return document.querySelector('td[data-block]') !== null")
    driver.save_screenshot(str(where / "dashboard-owd-blocks.png"))
    driver.execute_script("document.querySelector('td[data-block]').click()")
    until(driver, time.perf_counter(), "return document.querySelector('td[data-pair]') !== null")
    driver.save_screenshot(str(where / "dashboard-owd-block-opened.png"))


def until(driver, t0: float, script: str, *args) -> None:
    """Wait for `script` to return true in the page, checking every 10 ms; past RENDER_GIVE_UP_S the
    wait is recorded as it stands (a miss), and the other measurements still go on."""
    while driver.execute_script(script, *args) is not True and time.perf_counter() - t0 < RENDER_GIVE_UP_S:
        time.sleep(0.01)


def pusher(url: str, host: str, clock: Callable[[], int]) -> Callable[[int], None]:
    """A push of one `MARK` event from `host`, as its agent would send it."""
    def push(seq: int) -> None:
        credential = host_token(TOKEN, host)
        r = httpx.post(f"{url}/api/v1/push", headers={"Authorization": f"Bearer {credential}"}, timeout=30, json={
            "host": host, "boot": "bench", "events": [{"seq": seq, "t_ns": clock(), "kind": MARK, "device": "eth0"}]})
        r.raise_for_status()
    return push


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@BENCHMARKS.register("dashboard")
def main(hosts: Annotated[int, typer.Option(min=10)] = 2000, days: Annotated[float, typer.Option(min=0.1)] = 7.0,
         repeats: Annotated[int, typer.Option(min=5)] = 40, renders: Annotated[int, typer.Option(min=1)] = 5,
         db: Annotated[Path | None, typer.Option(help="Keep the database here (default: a temporary one).")] = None,
         json_path: Annotated[Path, typer.Option("--out", help="Where the record goes.")] = DEFAULT_JSON,
         screenshots: Annotated[Path | None, typer.Option(help="Save the heatmap at this scale here too.")] = None,
         ) -> None:
    """Generate the fleet's database, serve it, time each view's routes and first render."""
    facts = harness.machine()
    with tempfile.TemporaryDirectory() as tmp:
        path = db or Path(tmp) / "dashboard.db"
        shape = Shape(hosts=hosts, days=days)
        series = SeriesPath(data_dir=Path(tmp) / "series", fleet_token=TOKEN)
        series.start()
        t0 = time.perf_counter()
        made = generate(path, shape, time.time_ns(), engine_sink(series.url))
        with httpx.Client(base_url=series.url, timeout=300) as engine_http:
            made["samples"] += history(lambda b: engine_http.post("/api/v1/import", content=b).raise_for_status(),
                                       lambda: engine_http.get("/internal/force_flush").raise_for_status(),
                                       shape, made["now_ns"])
        httpx.get(series.url + "/internal/force_flush", timeout=60)  # all of it searchable before the timing
        generated_s = time.perf_counter() - t0
        out.print(f"database: {made['hosts']} hosts, {made['events']} events over {days:g} days, "
                  f"{made['samples']} samples, {made['bytes'] / 2**20:.0f} MiB, made in {generated_s:.0f} s")
        storage = SqliteStorage(path)
        offset = time.time_ns() - made["now_ns"]
        t0 = time.perf_counter()
        topo = shape.topology()
        monitor = Monitor.create(storage, topology=topo, series=series.series)
        # no agent pushes here: hosts would go stale and alerts open while the routes are timed
        fleet = Fleet(storage, hosts=sorted(topo.hosts) + sorted(topo.switches), monitor=monitor, stale_s=86400,
                      clock=lambda: time.time_ns() - offset, series=series)
        started_s = time.perf_counter() - t0
        listen = Listen(port=free_port())
        srv = server(fleet, TOKEN, listen)
        thread = start_in_thread(srv)
        stop = threading.Event()
        writer = threading.Thread(target=rewrite, args=(series.url, newest_round(shape), stop), daemon=True)
        writer.start()
        try:
            rows = time_routes(listen.url, made["now_ns"], repeats)
            page = time_page(listen.url, renders, pusher(listen.url, sorted(topo.hosts)[0], fleet.clock), screenshots)
        finally:
            stop.set()
            writer.join(60)
            srv.should_exit = True
            thread.join(10)
            storage.close()
            series.stop()
    report(rows, page, made, generated_s, started_s, facts, json_path)


def report(rows: list[dict], page: dict | None, made: dict, generated_s: float,
           started_s: float, facts: dict, json_path: Path) -> None:
    table = Table(title=f"dashboard routes, {made['hosts']} hosts, {made['events']} events")
    for col in ("view", "route", "p50 ms", "p95 ms", "bytes"):
        table.add_column(col, justify="left" if col in ("view", "route") else "right")
    for r in rows:
        table.add_row(r["view"], r["route"], f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}", str(r["bytes"]))
    out.print(table)
    worst = max((r for r in rows if r["view"] != BASELINE), key=lambda r: r["p95_ms"])
    targets = [Target(f"slowest route p95 ({worst['route']}, {worst['view']})", round(worst["p95_ms"], 1),
                      ROUTE_P95_MS, "ms", better="lower")]
    heat = next(r for r in rows if r["view"] == FIRST_OF_SECOND)
    base = next((r for r in rows if r["view"] == BASELINE), None)
    # what a request that finds no reading of the last second costs the controller: a reading
    # (where one takes long, the route serves the last while the next is read, and is faster)
    targets.append(Target("OWD heatmap: a reading of the fleet's newest delays, p95, against every path's route",
                          round(float(np.percentile(heat["reads_ms"], 95)), 1), ROUTE_P95_MS, "ms", better="lower",
                          baseline=round(base["p95_ms"], 1) if base else None,
                          note=(f"{len(heat['reads_ms'])} readings; the route asked once a second answered in "
                                f"{heat['p95_ms']:.1f} ms at p95 (a reading over "
                                f"{SHARE * HEATMAP_MAX_AGE_S * 1e3:.0f} ms is served while the next is read); "
                                "the baseline: /api/v1/owd, every path")))
    renders: dict[str, dict] = {}
    browser: dict = {}
    if page is not None:
        renders = {v: {"median_s": statistics.median(s), "max_s": max(s), "samples_s": s}
                   for v, s in page["renders"].items()}
        slowest = max(renders, key=lambda v: renders[v]["median_s"])
        for v, r in renders.items():
            out.print(f"first render {v}: median {r['median_s'] * 1e3:.0f} ms, worst {r['max_s'] * 1e3:.0f} ms")
        targets.append(Target(f"slowest first render, median ({slowest} view)",
                              round(renders[slowest]["median_s"], 3), RENDER_S, "s", better="lower"))
        lags = page["lag_s"]
        out.print(f"live update lag: median {statistics.median(lags) * 1e3:.0f} ms, worst {max(lags) * 1e3:.0f} ms"
                  f" ({len(lags)} pushes); console errors: {len(page['console_errors'])}")
        targets.append(Target(f"live update lag, worst of {len(lags)} pushes (events view)", round(max(lags), 3),
                              LAG_S, "s", better="lower"))
        browser = {"lag_s": lags, "console_errors": page["console_errors"]}
    else:
        out.print("first render and live lag: not measured (needs Debian's chromium and chromium-driver, and selenium)")
    out.print(harness.targets_table("dashboard targets", targets))
    database = {k: made[k] for k in ("hosts", "switches", "links", "events", "samples", "alerts", "audits", "jobs",
                                     "days", "bytes")}
    record("dashboard", targets, facts, {"database": database, "routes": rows, "renders": renders, **browser,
                                         "generated_s": generated_s, "controller_start_s": started_s},
           figures={"database_mib": round(made["bytes"] / 2**20), "events": made["events"], "hosts": made["hosts"],
                    "controller_start_s": round(started_s, 1)}, path=json_path)
    out.print(f"raw: {json_path}")
