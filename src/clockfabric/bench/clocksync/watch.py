"""`clockfabric bench clocksync`: one lab as the benchmark sees it (Fabric), and what it watches
during a sync (Watch): errors against the truth, agent CPU, probe traffic, link queues."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np

from clockfabric.clock import evaluate
from clockfabric.clock.evaluate import ours_errors, read_states, real_time_of, unsynced_reasons
from clockfabric.lab import impair
from clockfabric.lab.state import Lab

BOUND_NS = 1_000.0  # "converged": |error| within 1 µs


TCK = os.sysconf("SC_CLK_TCK")


def proc_ticks(pid: int, host: str) -> int | None:
    """utime + stime of the agent of `host` (None if that pid is not that agent any more)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"agent" not in argv or host.encode() not in argv:
            return None
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])
    except (OSError, IndexError, ValueError):
        return None


def cpu_pressure() -> float | None:
    """Share of the last 60 s in which some runnable task waited for a CPU (PSI)."""
    try:
        return float(Path("/proc/pressure/cpu").read_text().split()[2].split("=")[1])
    except (OSError, IndexError, ValueError):
        return None


def cpu_busy() -> tuple[int, int]:
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = f[3] + f[4]
    return sum(f) - idle, sum(f)


# ---- the lab ---------------------------------------------------------------------------------
class Fabric:
    """One lab: its hosts by leaf, its links with their current rates, tc counters."""

    def __init__(self, name: str):
        self.lab = Lab.open(name)
        topo = self.lab.topology
        self.topo = topo
        self.hosts = sorted(topo.hosts)
        self.reference = self.hosts[0]  # what `sync` picks (LabAgents: first by name)
        self.leaf_of = {}
        for lk in topo.links:
            for end, other in ((lk.a, lk.b), (lk.b, lk.a)):
                if end.node in topo.hosts:
                    self.leaf_of[end.node] = other.node
        leaves = sorted({v for v in self.leaf_of.values()}, key=lambda s: int(s.lstrip("leaf")))
        self.leaves = {leaf: sorted((h for h, v in self.leaf_of.items() if v == leaf),
                                    key=lambda h: int(h[1:])) for leaf in leaves}
        self.rates = {i: lk.rate_bps for i, lk in enumerate(topo.links)}
        self.host_rate = min(lk.rate_bps for lk in topo.links if lk.a.node in topo.hosts or lk.b.node in topo.hosts)

    def is_fabric(self, i: int) -> bool:
        lk = self.topo.links[i]
        return lk.a.node not in self.topo.hosts and lk.b.node not in self.topo.hosts

    def set_rates(self, bps: int, *, fabric_only: bool) -> None:
        """What `clockfabric lab rate A B RATE` does, for many links in one process."""
        for i, lk in enumerate(self.topo.links):
            if fabric_only and not self.is_fabric(i):
                continue
            impair.set_rate(self.lab, lk, bps)
            self.rates[i] = bps

    def set_host_rate(self, host: str, bps: int) -> None:
        """One host's link (both directions) at `bps`, as `clockfabric lab rate` would set it."""
        for i, lk in enumerate(self.topo.links):
            if host in (lk.a.node, lk.b.node):
                impair.set_rate(self.lab, lk, bps)
                self.rates[i] = bps

    def tc(self) -> dict[tuple[str, str], dict]:
        """Egress counters of every port: (node, iface) -> bytes, drops, queued packets."""
        stats: dict[tuple[str, str], dict] = {}
        for node in self.topo.nodes():
            p = subprocess.run(["tc", "-s", "-j", "-n", self.lab.ns(node), "qdisc", "show"],
                               capture_output=True, text=True)
            for q in json.loads(p.stdout or "[]"):
                s = stats.setdefault((node, q.get("dev")), {"bytes": 0, "drops": 0, "qlen": 0})
                if q.get("kind") == "htb" and q.get("root"):
                    s["bytes"] = q.get("bytes", 0)
                if q.get("kind") == "bfifo":  # one per traffic class where the port has classes
                    s["drops"] += q.get("drops", 0)
                    s["qlen"] += q.get("qlen", 0)
        return stats

    def link_load(self, t0: tuple[float, dict], looks: list[dict], t1: tuple[float, dict]) -> dict:
        """Per link direction: utilisation, drops, queue length (median and max of the looks
        taken during the run); and a summary."""
        (a_t, a), (b_t, b) = t0, t1
        dt = max(1e-3, b_t - a_t)
        rows = []
        for i, lk in enumerate(self.topo.links):
            for src, dst in ((lk.a, lk.b), (lk.b, lk.a)):
                key = (src.node, src.iface)
                if key not in a or key not in b:
                    continue
                bps = (b[key]["bytes"] - a[key]["bytes"]) * 8 / dt
                rows.append({"link": f"{src.node}>{dst.node}", "fabric": self.is_fabric(i), "rate_bps": self.rates[i],
                             "util": bps / self.rates[i], "drops": b[key]["drops"] - a[key]["drops"],
                             "queue_median_pkts": float(np.median(q)) if (q := [x[key]["qlen"] for x in looks
                                                                                 if key in x]) else None,
                             "queue_max_pkts": max(q) if q else None})

        def queued(r):  # a standing queue: drops, or 3+ packets queued in half the looks
            return r["drops"] > 0 or (r["queue_median_pkts"] or 0) >= 3

        def full(r):  # at line rate (downstream of a bottleneck a link can be full with no queue)
            return queued(r) or r["util"] >= 0.9

        fab = [r for r in rows if r["fabric"]]
        host = [r for r in rows if not r["fabric"]]

        def links(rs):
            return len({tuple(sorted(r["link"].split(">"))) for r in rs})

        return {
            "fabric_links": len(fab) // 2, "fabric_directions": len(fab),
            "fabric_links_queued": links([r for r in fab if queued(r)]),
            "fabric_directions_queued": sum(queued(r) for r in fab),
            "fabric_links_full": links([r for r in fab if full(r)]),
            "fabric_directions_full": sum(full(r) for r in fab),
            "fabric_directions_loaded_70pct": sum(r["util"] >= 0.7 for r in fab),
            "host_directions": len(host), "host_directions_queued": sum(queued(r) for r in host),
            "host_directions_full": sum(full(r) for r in host),
            "host_util_max": max((r["util"] for r in host), default=0.0),
            "fabric_util_max": max((r["util"] for r in fab), default=0.0),
            "queued_fabric": sorted(r["link"] for r in fab if queued(r)),
            "busy": [r for r in rows if r["util"] >= 0.05 or r["drops"]],
        }


# ---- watching the agents while `sync` runs ---------------------------------------------------
class Watch:
    def __init__(self, fab: Fabric, t_launch: float):
        self.fab, self.t0 = fab, t_launch
        self.state_dir = fab.lab.dir / "agents"
        self.first: dict[str, float] = {}  # host -> seconds since launch of its first state
        self.startup_cpu_s: dict[str, float] = {}
        self.cpu: dict[str, list[tuple[float, int]]] = {}  # host -> (t, ticks)
        self.bytes: dict[str, list[tuple[float, int, int, int]]] = {}  # host -> (t, local ns, wire, control)
        self.errors: list[tuple[float, int, str, float]] = []  # (t, real ns, host, error)
        self.bounds: list[tuple[float, str, float]] = []  # (t, host, its published bound)
        self.ensemble: list[tuple[float, float]] = []  # (t, global time minus true time, ns): steps and bends
        # (real ns its agent published the state, host, error): what the host served from then,
        # timed by the agent, not by when this watcher got a core on a loaded machine
        self.published: list[tuple[int, str, float]] = []
        self.agents_up_s: float | None = None
        self.converged_s: float | None = None
        self.worst: float | None = None
        self.named: dict[str, list[tuple[float, str]]] = {}  # host -> (t, why) at each sample it was not synced

    def sample(self) -> None:
        t = time.monotonic() - self.t0
        states = read_states(self.state_dir)
        real = time.time_ns()
        # global time runs ppm off real time (the reference's rate), so its series is placed at
        # the instant `real` was read, not at `t`, before the state files were: tens of ms apart
        # on a loaded machine, which at 40 ppm is microseconds of scatter off any line
        at_real = time.monotonic() - self.t0
        clocks = self.fab.lab.clocks()
        errors = ours_errors(states, clocks, self.fab.reference, real)
        self.ensemble.append((at_real, float(evaluate.global_truth(states, clocks, self.fab.reference, real) - real)))
        self.bounds += [(t, h, b) for h, b in evaluate.ours_bounds(states, clocks, real).items()]
        for h, st in states.items():
            pid = st.get("pid")
            ticks = proc_ticks(pid, h) if pid else None
            if ticks is None:
                continue
            if h not in self.first:
                self.first[h] = t
                self.startup_cpu_s[h] = ticks / TCK
            self.cpu.setdefault(h, []).append((t, ticks))
            c = st.get("counters", {})
            row = (t, st.get("updated_local_ns", 0), c.get("wire_bytes_sent", 0), c.get("control_bytes_sent", 0))
            if not self.bytes.get(h) or self.bytes[h][-1][1] != row[1]:
                self.bytes.setdefault(h, []).append(row)
        for h, why in unsynced_reasons(states).items():
            self.named.setdefault(h, []).append((t, why))
        if self.agents_up_s is None and len(self.first) == len(self.fab.hosts):
            self.agents_up_s = t
        others = {h: e for h, e in errors.items() if h != self.fab.reference}
        for h, e in others.items():
            if e is not None:
                self.errors.append((t, real, h, e))
                if (local := states[h].get("updated_local_ns")) and h in clocks:
                    self.published.append((real_time_of(clocks[h], local), h, e))
        known = [abs(e) for e in others.values() if e is not None]
        self.worst = max(known) if known else None
        if self.converged_s is None and others and all(e is not None and abs(e) <= BOUND_NS
                                                       for e in others.values()):
            self.converged_s = t

    def status(self, hosts: int) -> str:
        """Agents up, the worst error and convergence so far: one line for a person."""
        worst = f", worst |error| {self.worst:,.0f} ns" if self.worst is not None else ""
        conv = f", converged at {self.converged_s:.1f} s" if self.converged_s is not None else ""
        return f"{len(self.first)}/{hosts} agents up{worst}{conv}"

    def steady_from(self) -> float:
        if self.converged_s is not None:
            return self.converged_s
        return (self.agents_up_s or 0.0) + 5.0

    def cpu_pct(self) -> dict:
        t0 = self.steady_from()
        per = {}
        for h, marks in self.cpu.items():
            m = [x for x in marks if x[0] >= t0]
            if len(m) >= 2 and m[-1][0] - m[0][0] >= 3.0:
                per[h] = 100.0 * (m[-1][1] - m[0][1]) / TCK / (m[-1][0] - m[0][0])
        if not per:
            return {"mean_pct": None, "max_pct": None, "reference_pct": None, "hosts": 0}
        vals = list(per.values())
        others = [v for h, v in per.items() if h != self.fab.reference]
        return {"mean_pct": float(np.mean(vals)), "max_pct": max(vals),
                "mean_non_reference_pct": float(np.mean(others)) if others else None,
                "reference_pct": per.get(self.fab.reference), "hosts": len(per),
                "window_s": float(np.median([self.cpu[h][-1][0] for h in per])) - t0,
                "startup_cpu_s_mean": float(np.mean(list(self.startup_cpu_s.values())))}

    def probe_rate(self) -> dict:
        """Bytes each host sends per second once converged, from the agents' own counters (timed
        by their own clocks: ±100 ppm does not matter here): probes and their replies on the
        wire ("wire", what `sync` calls probe bytes), and control messages (reports to the
        solver; the reference also sends every host its map)."""
        t0 = self.steady_from()
        per: dict[str, tuple[float, float]] = {}
        for h, rows in self.bytes.items():
            r = [x for x in rows if x[0] >= t0]
            if len(r) >= 2 and r[-1][1] > r[0][1]:
                dt = (r[-1][1] - r[0][1]) / 1e9
                per[h] = ((r[-1][2] - r[0][2]) / dt, (r[-1][3] - r[0][3]) / dt)
        if not per:
            return {"wire_mean_bytes_per_s": None, "wire_max_bytes_per_s": None, "total_max_bytes_per_s": None}
        wire = {h: v[0] for h, v in per.items()}
        total = {h: v[0] + v[1] for h, v in per.items()}
        return {"wire_mean_bytes_per_s": float(np.mean(list(wire.values()))),
                "wire_max_bytes_per_s": max(wire.values()), "wire_max_host": max(wire, key=lambda h: wire[h]),
                "control_mean_bytes_per_s": float(np.mean([v[1] for v in per.values()])),
                "control_max_bytes_per_s": max(v[1] for v in per.values()),
                "total_max_bytes_per_s": max(total.values()), "total_max_host": max(total, key=lambda h: total[h])}

    def named_after(self, host: str, since_s: float) -> dict:
        """The first time from since_s at which host's agent said it was not synced, and why."""
        first = next(((t, why) for t, why in self.named.get(host, []) if t >= since_s), None)
        return {"after_s": None if first is None else first[0] - since_s, "reason": first and first[1]}

    def probe_shares(self, host_rate_bps: int, sync_bytes_per_s: float | None) -> dict:
        """probe_rate(), with each figure as a share of the host link rate; and `sync`'s own."""
        pr: dict = self.probe_rate()
        pr["sync_bytes_per_host_per_s"] = sync_bytes_per_s
        for k in ("wire_mean", "wire_max", "total_max"):
            v = pr[f"{k}_bytes_per_s"]
            pr[f"{k}_share_of_link"] = v * 8 / host_rate_bps if v else None
        pr["sync_share_of_link"] = sync_bytes_per_s * 8 / host_rate_bps if sync_bytes_per_s else None
        pr["host_link_bps"] = host_rate_bps
        return pr

    def reconvergence(self, host: str, step_real_ns: int) -> dict:
        """How long after the step the host's published mapping was back within BOUND_NS and
        stayed there 2 s, timed by when its agent published it (`reconverged_s`), and by
        when this watcher saw it (`sampled_reconverged_s`: later by up to a sample period,
        more when the machine is loaded)."""
        mine = [(real, e) for _, real, h, e in self.errors if h == host and real >= step_real_ns]
        if not mine:
            return {"reconverged_s": None, "note": "no samples after the step"}
        served: dict[int, float] = {}  # a state sampled twice is one publish
        for real, h, e in self.published:
            if h == host and real >= step_real_ns:
                served.setdefault(real, e)
        first_under = next(((real - step_real_ns) / 1e9 for real, e in mine if abs(e) <= BOUND_NS), None)
        settled = _settled(sorted(served.items()), step_real_ns)
        sampled = _settled(mine, step_real_ns)
        others_after = [abs(e) for _, real, h, e in self.errors
                        if h != host and step_real_ns <= real <= step_real_ns + 10e9]
        others_before = [abs(e) for _, real, h, e in self.errors
                         if h != host and step_real_ns - 10e9 <= real < step_real_ns]
        others_all = [abs(e) for _, real, h, e in self.errors if h != host and real >= step_real_ns]
        return {"reconverged_s": settled, "sampled_reconverged_s": sampled, "first_under_1us_s": first_under,
                "others_after_step": {k: v for k, v in zip(("p50_ns", "p99_ns", "max_ns"),
                                                           np.percentile(others_all, [50, 99, 100]).tolist(),
                                                           strict=True)} if others_all else None,
                "max_error_after_step_ns": max(abs(e) for _, e in mine),
                "others_max_error_10s_before_ns": max(others_before, default=None),
                "others_max_error_10s_after_ns": max(others_after, default=None),
                "samples_after_step": len(mine),
                "series": [[round((real - step_real_ns) / 1e9, 2), round(e)] for real, e in mine[:60]]}


def _settled(series: list[tuple[int, float]], step_real_ns: int) -> float | None:
    """Seconds from the step to the first (real ns, error) within BOUND_NS that every point of
    the next 2 s is within too, with 2 s of points after it (or it is the last)."""
    for i, (real, e) in enumerate(series):
        if abs(e) > BOUND_NS:
            continue
        later = [x for x in series[i:] if x[0] - real <= 2e9]
        if all(abs(x[1]) <= BOUND_NS for x in later) and (series[-1][0] - real >= 2e9 or i == len(series) - 1):
            return (real - step_real_ns) / 1e9
    return None
