"""What a day of a real fleet's samples costs the series engine's disk, at the 10 s cadence the
fleet figures are given for.

A sample's cost on disk has two parts: the data (timestamps and values, compressed in blocks of
each series), and the index, written once for each series and again for each day it has samples.
A run of a few minutes pays the index for a handful of samples a series, so its bytes a sample
say how many series were made, not what a sample costs: this benchmark measures the two apart.

Real series: a lab fleet (`clockfabric monitor`'s: the controller and its engine on h0, a pushing
agent on every host, as they run by default) runs for `--minutes`, with real TCP traffic between
two hosts for the middle third, so the delays queue and settle again as a working fabric's do.
Every series the engine then holds is exported, values and timestamps as written, and moved
within one day (yesterday, a day of its own). Then into engines of their own, flushed, merged and
stopped, and their files read:

- the series as the run made them: the `indexdb` folder over the series is the index a series
  (the caches the engine writes out when it stops, `cache/`, are said apart: they are sized by
  its memory in chunks of a megabyte or more, not by what it holds, and are rebuilt if lost);
- each name's series joined into one long series (one after another, each on its own gaps),
  alone in an engine: its `data` folder over its samples is that name's data a sample. A series
  over a day is long (8,640 samples at 10 s), and blocks compress better the longer they are,
  where the run's are a few dozen samples; joined, a series still jumps from one path's level to
  the next at each seam, so this stays an upper bound.

At 10 s every series is written once a cadence, whatever the run wrote it at (the agents'
delays come as each window of probes closes, link states each second), so the names' data a
sample is weighed by their series, not by the run's samples; the run's own mix is said beside it.

A day's bytes a sample is the data a sample plus the index a series over the samples a series has
in a day. The baseline is the SQL store's 173 bytes a sample (on PostgreSQL, measured at 570e30a:
docs/deploy.md).

    sudo clockfabric bench series-disk [--minutes 6] [--out PATH]
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console

from clockfabric.bench import harness
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, disk_bytes, labs_removed, record, targets_table
from clockfabric.console import require_root
from clockfabric.controller.series.engine import beside, engine
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build, traffic
from clockfabric.lab.monitoring import LabFleet
from clockfabric.topology import leafspine

LAB = "bench-sdisk"
CADENCE_S = 10.0  # the fleet figures' cadence
DAY_S = 86_400
BAR_BYTES = 2.0
PEERS = 10  # each agent's, as by default (a host has as many as the lab allows)
FLEET_HOSTS = 100_000  # the fleet the year's projection is for
BASE_BYTES = 173.0  # the SQL store's, on PostgreSQL, at 570e30a (docs/deploy.md)
IMPORT_LINES = 2_000  # series a request
DEFAULT_JSON = RESULTS / "series-disk.json"

out = Console()


def retimed(series: Iterable[dict], start_ms: int) -> Iterator[dict]:
    """The exported series (`/api/v1/export`'s lines) moved together, the earliest timestamp of
    them all to `start_ms`; gaps and values as written."""
    rows = list(series)
    shift = start_ms - min((t for s in rows for t in s["timestamps"]), default=start_ms)
    for s in rows:
        yield {**s, "timestamps": [t + shift for t in s["timestamps"]]}


def joined(series: Iterable[dict], start_ms: int, seam_ms: float) -> list[dict]:
    """One long series a name: its series' samples one after another (in the order of their
    labels), each keeping its own gaps, `seam_ms` between one and the next, from `start_ms`. Long,
    as a series is over a day, where the run's are short."""
    by_name: dict[str, list[dict]] = {}
    for s in sorted(series, key=lambda s: sorted(s["metric"].items())):
        by_name.setdefault(_name(s), []).append(s)
    out = []
    for name, parts in sorted(by_name.items()):
        values: list = []
        stamps: list[int] = []
        for part in parts:
            if not part["timestamps"]:
                continue
            at = stamps[-1] + round(seam_ms) if stamps else start_ms
            values += part["values"]
            stamps += [at + t - part["timestamps"][0] for t in part["timestamps"]]
        out.append({"metric": {"__name__": name, "joined": "1"}, "values": values, "timestamps": stamps})
    return out


def a_day(by_name: dict[str, tuple[float, int]], index_a_series: float, cadence_s: float = CADENCE_S) -> dict:
    """What a sample costs over a day in which every series is written once a `cadence_s`: each
    name's data a sample (`by_name`: name -> (data bytes a sample, its series)) weighed by its
    series, and the index a series paid once a day."""
    data = sum(cost * n for cost, n in by_name.values()) / max(sum(n for _, n in by_name.values()), 1)
    return {"data_bytes_a_sample": data, "index_bytes_a_series": index_a_series,
            "bytes_a_sample_a_day": data + index_a_series / (DAY_S / cadence_s)}


def _name(series: dict) -> str:
    return series["metric"].get("__name__", "")



def _export(data_dir: Path) -> list[dict]:
    """Every series an engine's data holds, read by an engine of its own on loopback."""
    child = engine(data_dir)
    child.start()
    try:
        r = httpx.get(f"{child.url}/api/v1/export", params={"match[]": '{__name__!=""}'}, timeout=300)
        r.raise_for_status()
        return [json.loads(line) for line in r.text.splitlines() if line.strip()]
    finally:
        child.stop()


def _import_and_merge(rows: list[dict], data_dir: Path) -> None:
    """`rows` into a fresh engine, flushed and merged, then the engine stopped (its files at rest)."""
    child = engine(data_dir)
    child.start()
    try:
        with httpx.Client(base_url=child.url, timeout=300) as c:
            for i in range(0, len(rows), IMPORT_LINES):
                body = "\n".join(json.dumps(s) for s in rows[i:i + IMPORT_LINES]) + "\n"
                c.post("/api/v1/import", content=body.encode()).raise_for_status()
            c.get("/internal/force_flush").raise_for_status()
            months = sorted({datetime.fromtimestamp(t / 1e3, timezone.utc).strftime("%Y_%m")
                             for s in rows for t in s["timestamps"][:1] + s["timestamps"][-1:]})
            for month in months:
                c.get("/internal/force_merge", params={"partition_prefix": month}).raise_for_status()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and _active_merges(c):
                time.sleep(0.5)
    finally:
        child.stop()


def _active_merges(c: httpx.Client) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in c.get("/metrics").text.splitlines()
               if line.startswith("vm_active_merges"))


def _run_fleet(minutes: float) -> tuple[list[dict], dict]:
    """A lab fleet run for `minutes`, traffic h1 -> h5 in its middle third; every series its
    engine holds, and what ran."""
    fabric = leafspine(8, 2, 2)
    with labs_removed(LAB):
        lab = build.up(fabric, LAB)
        fleet = LabFleet(lab, peers=PEERS)
        loaded: dict = {}  # what the traffic measured, or why it failed
        fleet.start()
        try:
            fleet.wait_pushing()
            third = minutes * 60 / 3
            out.print(f"fleet pushing: {minutes:g} min, traffic h1 -> h5 from {third:.0f} s for {third:.0f} s")
            time.sleep(third)

            def load() -> None:
                try:
                    loaded.update(traffic.run(lab, "h1", "h5", seconds=third))
                except ClockfabricError as e:
                    loaded["error"] = str(e)
            thread = threading.Thread(target=load, daemon=True)
            thread.start()
            time.sleep(2 * third)
            thread.join(60)
        finally:
            fleet.stop()
        rows = _export(beside(str(fleet.db)) / "engine")
    return rows, {"hosts": len(fabric.hosts), "peers": min(PEERS, len(fabric.hosts) - 1),
                  "minutes": minutes, "traffic": loaded}


@BENCHMARKS.register("series-disk")
def main(minutes: Annotated[float, typer.Option(min=1.0, help="How long the lab fleet writes.")] = 6.0,
         json_path: Annotated[Path, typer.Option("--out", help="Where the record goes.")] = DEFAULT_JSON) -> None:
    """A day of a real fleet's samples on the series engine's disk, at 10 s: data a sample and
    index a series apart."""
    require_root()
    facts = harness.machine()
    rows, ran = _run_fleet(minutes)
    if not rows:
        raise ClockfabricError("the lab fleet's engine held no series: did the agents push? see the lab's logs")
    start_ms = int((datetime.now(timezone.utc) - timedelta(days=1)).replace(
        hour=1, minute=0, second=0, microsecond=0).timestamp() * 1e3)  # yesterday: a day of its own
    moved = list(retimed(rows, start_ms))
    samples = sum(len(s["values"]) for s in moved)
    series_of = Counter(_name(s) for s in moved)
    by_name: dict[str, tuple[float, int]] = {}
    with tempfile.TemporaryDirectory(prefix="cf-series-disk-") as tmp:
        _import_and_merge(moved, Path(tmp) / "as-run")  # the fleet's series as they are: the index's cost
        total, index = disk_bytes(Path(tmp) / "as-run"), disk_bytes(Path(tmp) / "as-run" / "indexdb")
        caches = disk_bytes(Path(tmp) / "as-run" / "cache")
        for i, long in enumerate(joined(moved, start_ms, CADENCE_S * 1e3)):  # each name's data, alone
            _import_and_merge([long], Path(tmp) / f"name{i}")
            if stored := disk_bytes(Path(tmp) / f"name{i}" / "data"):  # none: only stale marks (ALERTS that ended)
                by_name[_name(long)] = (stored / len(long["values"]), series_of[_name(long)])
    split = a_day(by_name, index / len(moved))
    split["bytes_a_sample_as_run"] = total / samples
    weighed = [s for s in moved if _name(s) in by_name]
    split["data_bytes_a_sample_as_run_mix"] = (sum(by_name[_name(s)][0] * len(s["values"]) for s in weighed)
                                               / max(sum(len(s["values"]) for s in weighed), 1))
    # a year of a fleet of FLEET_HOSTS hosts, each writing as many series as a lab host did, each every 10 s
    samples_a_year = FLEET_HOSTS * len(moved) / ran["hosts"] * DAY_S / CADENCE_S * 365
    split["tb_a_year_at_fleet"] = samples_a_year * split["bytes_a_sample_a_day"] / 1e12
    names = sorted(series_of)
    detail = (f"{len(moved)} series of {len(names)} names from {ran['hosts']} hosts, {samples} samples "
              f"({samples / len(moved):.0f} a series); data {split['data_bytes_a_sample']:.2f} B a sample, each "
              f"name's weighed by its series ({split['data_bytes_a_sample_as_run_mix']:.2f} B in the run's own mix), "
              f"index {split['index_bytes_a_series']:.0f} B a series, paid once a day over {DAY_S / CADENCE_S:.0f} "
              f"samples; the series as the run made them, index and all: {split['bytes_a_sample_as_run']:.1f} B a "
              f"sample, with {caches / 1e6:.1f} MB of the engine's caches written out at its stop; "
              f"{len(moved) - len(weighed)} series held no sample at rest (stale marks only) and are left out; "
              f"{len(moved) / ran['hosts']:.0f} series a host ({ran['peers']} peers each): a year of {FLEET_HOSTS:,} "
              f"such hosts at 10 s is {split['tb_a_year_at_fleet']:.0f} TB")
    targets = [Target("disk a sample, a day of real series at 10 s", round(split["bytes_a_sample_a_day"], 3),
                      BAR_BYTES, "B", "lower", BASE_BYTES, note=detail)]
    out.print(targets_table("the series engine's disk", targets))
    out.print(detail)
    record("series-disk", targets, facts, {"ran": ran, "split": split, "series": len(moved), "samples": samples,
                                           "names": names, "as_run_bytes": total, "index_bytes": index,
                                           "cache_bytes": caches, "by_name": by_name},
           {"bytes_a_sample_a_day": round(split["bytes_a_sample_a_day"], 3)}, json_path)
    out.print(f"raw: {json_path}")
