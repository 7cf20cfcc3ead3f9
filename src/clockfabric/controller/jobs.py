"""Jobs and their flows as the controller answers for them, assembled from the newest sample of
each process group and flow that the agents' workload services pushed (the engine's `latest`),
and the pids each host's latest push names. Pure but for `of_fleet`: the samples and the clock
come in, dicts go out.

A process or flow is active while its agent keeps reporting it (within `active_ns`); one that
ended keeps its last values, marked inactive. A flow's peer is the host that reports the same
connection from its own end (its key reversed), else the host whose address is the far end.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from clockfabric.controller.series.sample import Sample
from clockfabric.workload.flowgroups import parse_pair
from clockfabric.workload.owd import FALLBACK, INBAND
from clockfabric.workload.samples import DIRECTIONS, FLOW_STATS, OWD_FIELDS, OWD_SAMPLES, PROCESSES, START

if TYPE_CHECKING:
    from clockfabric.controller.fleet import Fleet

FLOW_SAMPLES = [f"job_flow_{stat}" for stat in FLOW_STATS] + OWD_SAMPLES
ACTIVE_NS = 10 * 10**9  # three missed pushes and some
GROUP = ("jobid", "rank", "source", "run", "visible")  # a process group's labels (samples.process_labels)


def _group(labels: dict) -> tuple[str, ...]:
    return tuple(str(labels.get(k, "")) for k in GROUP)


def processes_by_job(counts: Iterable[Sample], starts: Iterable[Sample], infos: dict[str, dict], now_ns: int,
                     active_ns: int = ACTIVE_NS) -> dict[str, list[dict]]:
    """Each job's process groups, one per (host, rank, run, source, visible): how many, the earliest
    start, and while active the pids its host's latest push info names (`workload.processes`)."""
    start_of = {(s.host, _group(s.labels)): s.value for s in starts}
    pids: dict[tuple[str, tuple[str, ...]], list[int]] = defaultdict(list)
    for host, info in infos.items():
        for p in (info.get("workload") or {}).get("processes", []):
            pids[host, _group(p)].append(int(p["pid"]))
    out: dict[str, list[dict]] = defaultdict(list)
    for s in counts:
        if jobid := s.labels.get("jobid"):
            key, rank, active = _group(s.labels), s.labels.get("rank", ""), now_ns - s.t_ns < active_ns
            out[jobid].append({"host": s.host, "rank": int(rank) if rank.isdigit() else None,
                               "source": s.labels.get("source", ""), "run": s.labels.get("run", ""),
                               "count": int(s.value), "start_ns": int(start_of.get((s.host, key), 0.0) * 1e9),
                               "t_ns": s.t_ns, "flows_visible": s.labels.get("visible", "1") == "1",
                               "active": active, "pids": sorted(pids[s.host, key]) if active else []})
    return out


def of_fleet(fleet: Fleet) -> dict[str, list[dict]]:
    """processes_by_job over the fleet's latest samples and its hosts' latest push info."""
    infos = {h.name: h.info for h in fleet.storage.hosts()}
    return processes_by_job(fleet.samples.latest(PROCESSES), fleet.samples.latest(START), infos, fleet.clock())


def exists(fleet: Fleet, jobid: str) -> bool:
    """Whether any host reported job `jobid`'s processes: of_fleet's jobs, read by the job's label."""
    return bool(fleet.samples.latest(PROCESSES, match={"jobid": jobid}))


def summary(jobid: str, procs: list[dict]) -> dict:
    """A job in a list: where it runs, its ranks, when it started, whether it still runs."""
    return {"jobid": jobid, "source": procs[0]["source"], "hosts": sorted({p["host"] for p in procs}),
            "ranks": sorted({p["rank"] for p in procs if p["rank"] is not None}),
            "processes": sum(p["count"] for p in procs if p["active"]), "start_ns": min(p["start_ns"] for p in procs),
            "last_seen_ns": max(p["t_ns"] for p in procs), "active": any(p["active"] for p in procs)}


def connections_of(jobid: str, infos: dict[str, dict]) -> dict[tuple[str, str], list[dict]]:
    """The job's connections each host's latest push names (5-tuple, pid, rates), by (host, flow group)."""
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for host, info in infos.items():
        for f in (info.get("workload") or {}).get("flows", []):
            if f.get("jobid") == jobid:
                out[host, f["group"]].append({k: f.get(k) for k in ("flow", "pid", "tx_bps", "rx_bps", "rtt_us")})
    return out


def flows_of(jobid: str, by_stat: dict[str, list[Sample]], addresses: dict[str, str], now_ns: int,
             connections: dict[tuple[str, str], list[dict]] | None = None, active_ns: int = ACTIVE_NS) -> list[dict]:
    """Each flow group of the job (flowgroups: its connections from one address to another), one row
    per (reporting host, group) with every stat; `addresses`: host by address; `connections`: the
    5-tuples the hosts' pushes name, by (host, group)."""
    rows: dict[tuple[str, str], dict] = {}
    for name, found in by_stat.items():
        stat = name.removeprefix("job_flow_")
        for s in found:
            if s.labels.get("jobid") != jobid or (ends := parse_pair(s.labels.get("flow", ""))) is None:
                continue
            row = rows.setdefault((s.host, s.labels["flow"]), {
                "host": s.host, "flow": s.labels["flow"], "local": ends[0], "remote": ends[1],
                "peer": addresses.get(ends[1]), "t_ns": 0, **{k: None for k in FLOW_STATS},
                "connections": sorted((connections or {}).get((s.host, s.labels["flow"]), []),
                                      key=lambda c: c["flow"])})
            row[stat] = s.value
            row["t_ns"] = max(row["t_ns"], s.t_ns)
    reported = {}  # (local, remote) -> the host that reports it
    for row in rows.values():
        reported[(row["local"], row["remote"])] = row["host"]
    for row in rows.values():
        row["peer"] = reported.get((row["remote"], row["local"]), row["peer"])
        row["active"] = now_ns - row["t_ns"] < active_ns
        row["owd"] = _owd(row)
    return sorted(rows.values(), key=lambda r: (not r["active"], r["host"], r["flow"]))


def _owd(row: dict) -> dict[str, dict | None]:
    """The flow's one-way delays by direction, out of the row's flat owd_<dir>_<field> stats: in-band, or
    RTT/2 (`source` says which), or None where its host has none."""
    out: dict[str, dict | None] = {}
    for direction in DIRECTIONS:
        found = {f: row.pop(f"owd_{direction}_{f}", None) for f in OWD_FIELDS}
        if found["p50_ns"] is None:
            out[direction] = None
            continue
        fallback = found.pop("fallback")
        out[direction] = {**{f: int(v) for f, v in found.items() if v is not None},
                          "source": FALLBACK if fallback else INBAND}
    return out


def detail(jobid: str, procs: list[dict], flows: list[dict]) -> dict:
    """One job whole: its hosts with their ranks and processes (pid None where its host's push
    no longer names it: ended), and its flows."""
    hosts: dict[str, dict] = {}
    for p in sorted(procs, key=lambda p: (p["host"], p["pids"], p["rank"] is None, p["rank"] or 0)):
        h = hosts.setdefault(p["host"], {"host": p["host"], "ranks": [], "processes": [], "start_ns": p["start_ns"]})
        if p["rank"] is not None and p["rank"] not in h["ranks"]:
            h["ranks"].append(p["rank"])
        pids: list[int | None] = [*p["pids"][:p["count"]], *[None] * (p["count"] - len(p["pids"]))]
        h["processes"] += [{"pid": pid, **{k: p[k] for k in ("rank", "run", "start_ns", "active", "flows_visible")}}
                           for pid in pids]
        h["start_ns"] = min(h["start_ns"], p["start_ns"])
    return {**summary(jobid, procs), "by_host": list(hosts.values()), "flows": flows}
