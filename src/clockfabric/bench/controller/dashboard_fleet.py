"""A synthetic controller database and series engine for the dashboard's scale targets: a fleet
of N hosts on a multi-plane leaf-spine, a week of their events, alerts and audits in the database,
the newest of every series the views read (link states, the OWD matrix), the hour of a second's
updates behind the heatmap's statistic (`history`), and jobs with flows over their last minutes
in the engine.

What is not synthesised: a week of every sample. No view reads it (they read the latest and
windows of minutes). The hour behind the heatmap's delays is there because a "latest" read costs
the engine every sample in its look-back, not the newest alone
(docs/notes/2026-12-07-series-lookback.md).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from clockfabric.audit.model import CheckResult, Finding, Report, Verdict
from clockfabric.controller.series.sample import Sample
from clockfabric.controller.storage.base import Alert, Audit, Event
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.serieswire import SERVED, line, series_name
from clockfabric.topology import Topology, interfaces, multirail

WEEK_NS = 7 * 86400 * 10**9
SECOND_NS = 10**9
BATCH = 50_000
EVENT_KINDS = (("link_down", 2), ("link_up", 2), ("clock_step", 1), ("agent_start", 1), ("lldp_change", 1),
               ("failover_switch", 1), ("nic_errors", 2))
OWD_STATS = ("min", "p50", "p99", "floor")
HISTORY_STAT, HISTORY_S = "p50", 3600  # the heatmap opens on p50; an hour, the longest "latest" look-back
_LABEL = re.compile(r'(\w+)="([^"]*)"')
FLOW_STATS = ("tx_bps", "rx_bps", "rtt_us", "retransmits_total", "cwnd", "delivery_bps")


@dataclass(frozen=True)
class Shape:
    hosts: int = 2000
    planes: int = 2
    leaves: int = 32  # per plane
    spines: int = 8
    days: float = 7.0
    events_per_host_hour: float = 2.0
    alerts: int = 2000
    open_alerts: int = 30
    audits: int = 20
    peers: int = 8  # each host probes this many peers, on 2 paths
    jobs: int = 16
    job_hosts: int = 8
    job_window_s: int = 300
    seed: int = 0

    def topology(self) -> Topology:
        return multirail(self.hosts, self.planes, self.leaves, self.spines, name=f"synthetic-{self.hosts}")


def engine_sink(engine_url: str) -> Callable[[list[Sample]], None]:
    """Samples into the engine's own import path (trusted: each line names its host)."""
    import httpx

    def sink(samples: list[Sample]) -> None:
        body = "".join(line(s.name, s.value, s.labels, s.t_ns // 1_000_000, host=s.host) + "\n" for s in samples)
        httpx.post(engine_url + "/api/v1/import/prometheus", content=body.encode(), timeout=60).raise_for_status()

    return sink


def generate(path: Path, shape: Shape, now_ns: int, sink: Callable[[list[Sample]], None]) -> dict:
    """Write the database at `path` (a new file) and the samples to `sink`; returns what it holds,
    with the database's size."""
    if path.exists():
        path.unlink()
    rng = random.Random(shape.seed)
    topo = shape.topology()
    hosts, switches = sorted(topo.hosts), sorted(topo.switches)
    with SqliteStorage(path) as storage:
        for name in hosts + switches:
            storage.enroll(name, now_ns - WEEK_NS)
        stale = set(rng.sample(hosts, max(1, len(hosts) // 100)))
        for name in hosts + switches:
            info = {"address": str(topo.hosts[name].address)} if name in topo.hosts else {}
            age = 60 * SECOND_NS if name in stale else rng.randrange(SECOND_NS)
            storage.seen(name, now_ns - age, {**info, "synced": name not in stale, "boot": "b"})
        events = _events(storage, shape, hosts, rng, now_ns)
        samples = _latest(sink, topo, shape, rng, now_ns) + _jobs(sink, topo, shape, rng, now_ns)
        _alerts(storage, shape, hosts, rng, now_ns)
        _audits(storage, shape, hosts, now_ns)
    size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    facts = {"hosts": len(hosts), "switches": len(switches), "links": len(topo.links), "events": events,
             "samples": samples, "alerts": shape.alerts, "audits": shape.audits, "jobs": shape.jobs,
             "days": shape.days, "bytes": size, "now_ns": now_ns}
    path.with_suffix(".json").write_text(json.dumps({"shape": shape.__dict__, **facts}, indent=1) + "\n")
    return facts


def history(post: Callable[[bytes], object], flush: Callable[[], object], shape: Shape, now_ns: int, *,
            seconds: int = HISTORY_S, chunk_s: int = 300) -> int:
    """The hour before `now_ns` of every probe path's HISTORY_STAT delay, a value a second as an
    agent writes it (within 5% of `latest_round`'s from the shape's seed, the round the bench writes
    again while it times the routes), as JSON-line bodies `post`ed to the engine's
    /api/v1/import: `chunk_s` at a time, oldest first, each chunk `flush`ed into parts of its own,
    as a live fleet's writes land. Returns the samples written."""
    topo = shape.topology()
    name = f"owd_{HISTORY_STAT}_ns"
    rows = [s for s in latest_round(topo, shape, random.Random(shape.seed), now_ns) if s.name == name]
    labels = [dict(_LABEL.findall(line(s.name, s.value, s.labels, None, host=s.host))) for s in rows]
    scale = 1e-9 if name in SERVED else 1.0  # the engine holds a delay in seconds
    rng, end_ms, written = random.Random(shape.seed + 1), now_ns // 1_000_000 - 1000, 0
    for start_s in range(seconds, 0, -chunk_s):
        stamps = [end_ms - 1000 * k for k in range(start_s - 1, max(start_s - chunk_s, 0) - 1, -1)]
        for i in range(0, len(rows), 2000):
            body = "\n".join(json.dumps({"metric": {"__name__": series_name(name), **labels[j]},
                                         "values": [round(rows[j].value * scale * (1 + 0.05 * rng.random()), 12)
                                                    for _ in stamps], "timestamps": stamps})
                             for j in range(i, min(i + 2000, len(rows))))
            post(body.encode())
            written += len(stamps) * (min(i + 2000, len(rows)) - i)
        flush()
    return written


def _events(storage: SqliteStorage, shape: Shape, hosts: list[str], rng: random.Random, now_ns: int) -> int:
    span = int(shape.days * 86400 * SECOND_NS)
    total = int(len(hosts) * shape.days * 24 * shape.events_per_host_hour)
    kinds = [k for k, weight in EVENT_KINDS for _ in range(weight)]
    times = sorted(now_ns - rng.randrange(span) for _ in range(total))  # stored in arrival order, as pushed
    for start in range(0, total, BATCH):
        storage.add_events([Event(host=rng.choice(hosts), seq=start + i, boot="synthetic", t_ns=t,
                                  kind=rng.choice(kinds), device=f"eth{rng.randrange(shape.planes)}")
                            for i, t in enumerate(times[start:start + BATCH])])
    return total


def _latest(sink: Callable[[list[Sample]], None], topo: Topology, shape: Shape, rng: random.Random, now_ns: int) -> int:
    out = latest_round(topo, shape, rng, now_ns)
    for start in range(0, len(out), BATCH):
        sink(out[start:start + BATCH])
    return len(out)


def latest_round(topo: Topology, shape: Shape, rng: random.Random, now_ns: int) -> list[Sample]:
    """One update of every port's link state and every probe path's delays, each written within
    the second before `now_ns`: what the fleet's agents write at each update."""
    out = [Sample(p.node, now_ns - rng.randrange(SECOND_NS), "link_up", 1.0, {"device": p.iface})
           for p in interfaces(topo)]
    hosts = sorted(topo.hosts)
    for i, src in enumerate(hosts):
        for k in range(1, shape.peers + 1):
            dst = hosts[(i + k * 7) % len(hosts)]
            for path in ("p0", "p1"):
                floor = 8_000 + rng.random() * 4_000
                for stat, over in zip(OWD_STATS, (1.0, 1.1, 1.6, 1.0), strict=True):
                    out.append(Sample(src, now_ns - rng.randrange(SECOND_NS), f"owd_{stat}_ns", floor * over,
                                      {"src": src, "dst": dst, "path": path}))
    return out


def _jobs(sink: Callable[[list[Sample]], None], topo: Topology, shape: Shape, rng: random.Random, now_ns: int) -> int:
    """Each job on `job_hosts` hosts in a ring: a flow from each to the next, every second of the
    window; the first job's flow out of its first host is slow (ten times its siblings' RTT)."""
    nic = {p.node: str(i.address.ip) for p, i in interfaces(topo).items()
           if p.node in topo.hosts and topo.plane_of(p) == 0}
    hosts = sorted(topo.hosts)
    rows: list[Sample] = []
    written = 0
    for j in range(shape.jobs):
        members = hosts[j * shape.job_hosts:(j + 1) * shape.job_hosts]
        jobid = f"train-{j:03d}"
        for t in range(now_ns - shape.job_window_s * SECOND_NS, now_ns, SECOND_NS):
            for rank, host in enumerate(members):
                group = {"jobid": jobid, "rank": str(rank), "source": "slurm", "run": "r1", "visible": "1"}
                rows += [Sample(host, t, "job_processes", 1.0, group),
                         Sample(host, t, "job_start_seconds", (now_ns - 3600 * SECOND_NS) / 1e9, group)]
                peer = members[(rank + 1) % len(members)]
                flow = f"{nic[host]}->{nic[peer]}"  # a flow group: its ends, no port
                slow = j == 0 and rank == 0
                rtt = (2_000.0 if slow else 200.0) * (1 + 0.1 * rng.random())
                values = (40e6 if slow else 90e6, 0.0, rtt, 0.0, 10.0, 90e6)
                rows += [Sample(host, t, f"job_flow_{stat}", v, {"jobid": jobid, "flow": flow})
                         for stat, v in zip(FLOW_STATS, values, strict=True)]
            if len(rows) >= BATCH:
                sink(rows)
                written, rows = written + len(rows), []
    sink(rows)
    return written + len(rows)


def _alerts(storage: SqliteStorage, shape: Shape, hosts: list[str], rng: random.Random, now_ns: int) -> None:
    span = int(shape.days * 86400 * SECOND_NS)
    opened = sorted(now_ns - rng.randrange(span) for _ in range(shape.alerts))
    for i, t in enumerate(opened):
        host = rng.choice(hosts)
        storage.open_alert(Alert(key=f"synthetic:{i}", kind=rng.choice(("link_down", "flapping", "congestion")),
                                 severity=rng.choice(("warning", "critical")), message=f"{host}: synthetic alert {i}",
                                 opened_ns=t, detail={"host": host}))
        if i < shape.alerts - shape.open_alerts:
            storage.resolve_alert(f"synthetic:{i}", t + rng.randrange(3600 * SECOND_NS))


def _audits(storage: SqliteStorage, shape: Shape, hosts: list[str], now_ns: int) -> None:
    for a in range(shape.audits):
        failing = [Finding(Verdict.FAIL, "no carrier", host=h, device="eth1") for h in hosts[a::97]]
        results = [CheckResult(f"check.{c}", f"category-{c % 4}", f"Check {c}", Verdict.PASS, "all hosts pass", [])
                   for c in range(12)]
        results.append(CheckResult("nic.link", "backend-nics", "NIC links up", Verdict.FAIL,
                                   f"{len(failing)} NICs down", failing, fix="reseat the cable"))
        report = Report(fleet="synthetic", hosts=hosts, results=results,
                        started_ns=now_ns - (shape.audits - a) * 3600 * SECOND_NS, seconds=30.0).as_dict()
        storage.add_audit(Audit(t_ns=report["started_ns"], fleet="synthetic", verdict=report["verdict"],
                                exit_code=report["exit_code"], counts=report["counts"], report=report))
