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

A fleet's day is projected from what each series is, not from the run's own mix (said beside it):
- an agent's series is written once a cadence at 10 s, whatever the run wrote it at (the delays
  come as each window of probes closes, link states each second); the rules' outputs (the names
  the shipped rules record, and ALERTS) once an evaluation of the controller's vmalert;
- a series of a peer (a `dst` or `peer` label) is one of as many as an agent has peers by
  default, where the lab's 8 hosts allow 7.
Each name's data a sample is weighed by its samples a day so made; a day's bytes a sample adds
the index of the day's series over the day's samples, and the year of FLEET_HOSTS hosts is those
samples at those bytes. The baseline is the SQL store's 173 bytes a sample (on PostgreSQL,
measured at 570e30a: docs/deploy.md), for the same samples.

    sudo clockfabric bench series-disk [--minutes 6] [--out PATH]
"""

from __future__ import annotations

import json
import re
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, NamedTuple

import httpx
import typer
from rich.console import Console

from clockfabric.agent.config import AgentConfig
from clockfabric.bench import harness
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, disk_bytes, labs_removed, record, targets_table
from clockfabric.console import require_root
from clockfabric.controller.rules import BRIDGE, RULES
from clockfabric.controller.series.engine import beside, engine
from clockfabric.controller.series.vmalert import INTERVAL_S as RULES_EVERY_S
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build, traffic
from clockfabric.lab.monitoring import LabFleet
from clockfabric.topology import leafspine

LAB = "bench-sdisk"
CADENCE_S = 10.0  # the fleet figures' cadence
DAY_S = 86_400
BAR_BYTES = 2.0
BAR_TB = 120.0  # a year of FLEET_HOSTS hosts' raw samples
PEERS = AgentConfig.peers  # each agent's, as by default (a host has as many as the lab allows)
FLEET_HOSTS = 100_000  # the fleet the year's projection is for
PEER_LABELS = ("dst", "peer")  # a series of one of an agent's peers
ALERTS = ("ALERTS", "ALERTS_FOR_STATE")  # vmalert's own, written each evaluation
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


class Name(NamedTuple):
    """One name's part of a fleet host's day."""

    data: float  # bytes a sample, its series joined
    series: float  # a fleet host's series of it
    every_s: float  # one sample a series this often


def a_day(names: dict[str, Name], index_a_series: float) -> dict:
    """What a sample costs over a fleet host's day: each name's data a sample weighed by its
    samples a day, and the index of the day's series over the day's samples."""
    samples = {name: n.series * DAY_S / n.every_s for name, n in names.items()}
    total = max(sum(samples.values()), 1e-9)
    data = sum(n.data * samples[name] for name, n in names.items()) / total
    index = index_a_series * sum(n.series for n in names.values()) / total
    return {"data_bytes_a_sample": data, "index_bytes_a_series": index_a_series,
            "bytes_a_sample_a_day": data + index, "samples_a_day_a_host": total,
            "series_a_host": sum(n.series for n in names.values())}


def rule_outputs(files: Iterable[Path] = (RULES, BRIDGE)) -> set[str]:
    """The names the shipped rules record, and the alerts' own: written by vmalert, not by an agent."""
    found = set(ALERTS)
    for f in files:
        found |= set(re.findall(r"^\s*-?\s*record:\s*(\S+)\s*$", f.read_text(), re.MULTILINE))
    return found


def fleet_series(series: Iterable[dict], hosts: int, peers: int, fleet_peers: int = PEERS) -> dict[str, float]:
    """A fleet host's series of each name: the lab's a host, each series of a peer counted as
    one of `fleet_peers` where the lab gave each agent `peers`."""
    found: dict[str, float] = {}
    for s in series:
        scale = fleet_peers / peers if any(k in s["metric"] for k in PEER_LABELS) else 1.0
        found[_name(s)] = found.get(_name(s), 0.0) + scale / hosts
    return found


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
    series_of = fleet_series(moved, ran["hosts"], ran["peers"])
    by_rules = rule_outputs()
    by_name: dict[str, Name] = {}
    with tempfile.TemporaryDirectory(prefix="cf-series-disk-") as tmp:
        _import_and_merge(moved, Path(tmp) / "as-run")  # the fleet's series as they are: the index's cost
        total, index = disk_bytes(Path(tmp) / "as-run"), disk_bytes(Path(tmp) / "as-run" / "indexdb")
        caches = disk_bytes(Path(tmp) / "as-run" / "cache")
        for i, long in enumerate(joined(moved, start_ms, CADENCE_S * 1e3)):  # each name's data, alone
            _import_and_merge([long], Path(tmp) / f"name{i}")
            if stored := disk_bytes(Path(tmp) / f"name{i}" / "data"):  # none: only stale marks (ALERTS that ended)
                name = _name(long)
                by_name[name] = Name(stored / len(long["values"]), series_of[name],
                                     RULES_EVERY_S if name in by_rules else CADENCE_S)
    split = a_day(by_name, index / len(moved))
    split["bytes_a_sample_as_run"] = total / samples
    weighed = [s for s in moved if _name(s) in by_name]
    split["data_bytes_a_sample_as_run_mix"] = (sum(by_name[_name(s)].data * len(s["values"]) for s in weighed)
                                               / max(sum(len(s["values"]) for s in weighed), 1))
    samples_a_year = FLEET_HOSTS * split["samples_a_day_a_host"] * 365
    split["tb_a_year_at_fleet"] = samples_a_year * split["bytes_a_sample_a_day"] / 1e12
    names = sorted({_name(s) for s in moved})
    detail = (f"{len(moved)} series of {len(names)} names from {ran['hosts']} hosts ({ran['peers']} peers an "
              f"agent), {samples} samples ({samples / len(moved):.0f} a series); data "
              f"{split['data_bytes_a_sample']:.2f} B a sample, each name's weighed by its samples a fleet day "
              f"({split['data_bytes_a_sample_as_run_mix']:.2f} B in the run's own mix), index "
              f"{split['index_bytes_a_series']:.0f} B a series; the series as the run made them, index and all: "
              f"{split['bytes_a_sample_as_run']:.1f} B a sample, with {caches / 1e6:.1f} MB of the engine's caches "
              f"written out at its stop; {len(moved) - len(weighed)} series held no sample at rest (stale marks "
              f"only) and are left out; a fleet host at {PEERS} peers: {split['series_a_host']:.0f} series, "
              f"{split['samples_a_day_a_host']:,.0f} samples a day (agents' every {CADENCE_S:g} s, the rules' "
              f"every {RULES_EVERY_S:g} s)")
    targets = [Target("disk a sample, a day of real series at 10 s", round(split["bytes_a_sample_a_day"], 3),
                      BAR_BYTES, "B", "lower", BASE_BYTES, note=detail),
               Target(f"a year of {FLEET_HOSTS:,} hosts' raw samples", round(split["tb_a_year_at_fleet"], 1),
                      BAR_TB, "TB", "lower", round(samples_a_year * BASE_BYTES / 1e12, 1),
                      note="the same samples at the SQL store's 173 B for the baseline")]
    out.print(targets_table("the series engine's disk", targets))
    out.print(detail)
    record("series-disk", targets, facts, {"ran": ran, "split": split, "series": len(moved), "samples": samples,
                                           "names": names, "as_run_bytes": total, "index_bytes": index,
                                           "cache_bytes": caches,
                                           "by_name": {k: v._asdict() for k, v in by_name.items()}},
           {"bytes_a_sample_a_day": round(split["bytes_a_sample_a_day"], 3),
            "tb_a_year_at_fleet": round(split["tb_a_year_at_fleet"], 1)}, json_path)
    out.print(f"raw: {json_path}")
