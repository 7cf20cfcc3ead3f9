"""The contention runs summarized per scenario and scheduler, and owd judged against its
targets, each ratio with its bootstrap interval over the seeds (harness.resampled_medians)."""

from __future__ import annotations

import statistics

import numpy as np

from clockfabric.bench.contention.model import (
    QUIET_SLACK,
    TARGETS,
    Run,
    busbw_gbps,
    ideal_time_s,
    jobs_of,
    tcp_payload,
)
from clockfabric.bench.harness import interval, resampled_medians
from clockfabric.topology import Topology


def summarize(topo: Topology, runs: list[Run], size: int) -> list[dict]:
    """Per scenario and scheduler: the median over seeds of the slowest job's time, with the
    fastest and slowest seed's (a lead smaller than the seeds' spread is noise), its busbw,
    and the ratios to ecmp, to least-outstanding, to the ideal and to the ideal at TCP's
    ceiling; with ecmp's time over the ideal (the most any scheduler could gain)
    and the median CPU steal over those runs."""
    rows = []
    payload = tcp_payload(topo.mtu)
    for scenario in dict.fromkeys(r.scenario for r in runs):
        collective, hosts = jobs_of(scenario)[0]
        ideal_s = ideal_time_s(topo, scenario, size)
        mine = [r for r in runs if r.scenario == scenario]
        times = {s: sorted(r.time_us / 1e6 for r in mine if r.scheduler == s)
                 for s in dict.fromkeys(r.scheduler for r in mine)}
        median = {s: statistics.median(ts) for s, ts in times.items()}
        for scheduler, t in median.items():
            rows.append({"scenario": scenario, "scheduler": scheduler, "time_s": round(t, 3),
                         "time_range_s": [round(times[scheduler][0], 3), round(times[scheduler][-1], 3)],
                         "times_s": [round(x, 4) for x in times[scheduler]],
                         "busbw_gbps": round(busbw_gbps(collective, size, len(hosts), t), 6),
                         "speedup_vs_ecmp": round(median["ecmp"] / t, 3) if "ecmp" in median else None,
                         "speedup_vs_least_outstanding": (round(median["least-outstanding"] / t, 3)
                                                          if "least-outstanding" in median else None),
                         "of_ideal": round(ideal_s / t, 3), "ideal_time_s": round(ideal_s, 3),
                         "of_tcp_ideal": round(ideal_s / payload / t, 3),
                         "tcp_ideal_time_s": round(ideal_s / payload, 3),
                         "tcp_bound_time_s": round(ideal_time_s(topo, scenario, size, fair=False) / payload, 3),
                         "ecmp_over_ideal": round(median["ecmp"] / ideal_s, 3) if "ecmp" in median else None,
                         "ideal_busbw_gbps": round(busbw_gbps(collective, size, len(hosts), ideal_s), 6),
                         "wrong": sum(j["wrong"] for r in mine if r.scheduler == scheduler for j in r.jobs),
                         "on_standbys": standby_share(r for r in mine if r.scheduler == scheduler),
                         **outside(r for r in mine if r.scheduler == scheduler),
                         "cpu_steal": median_steal(r for r in mine if r.scheduler == scheduler)})
    return rows


def judge(summary: list[dict]) -> list[dict]:
    """owd against TARGETS, per scenario it ran in. Contention: per target the value, the bar,
    met, possible (False where even the TCP bound is not that much faster than the baseline)
    and its interval. No contention ("none"): owd's time over the best baseline's, met, and
    its interval."""
    verdicts = []
    for scenario in dict.fromkeys(r["scenario"] for r in summary):
        rows = {r["scheduler"]: r for r in summary if r["scenario"] == scenario}
        if "owd" not in rows:
            continue
        mine = rows["owd"]
        medians = resampled_medians({s: r["times_s"] for s, r in rows.items()})
        if scenario == "none":
            baselines = [s for s in rows if s != "owd"]
            best = min((rows[s]["time_s"] for s in baselines), default=None)
            over = None if best is None else round(mine["time_s"] / best, 3)
            spread = interval(medians["owd"] / np.min([medians[s] for s in baselines], axis=0)) if baselines else None
            verdicts.append({"scenario": scenario, "over_best_baseline": over, "bar": QUIET_SLACK,
                             "met": over is not None and over <= QUIET_SLACK, "interval": spread})
            continue
        tcp_ideal_s, tcp_bound_s = mine["tcp_ideal_time_s"], mine["tcp_bound_time_s"]
        verdict = {"scenario": scenario}
        for key, baseline in (("vs_ecmp", "ecmp"), ("vs_least_outstanding", "least-outstanding")):
            value = mine[f"speedup_{key}"]
            if value is None:
                continue
            verdict[key] = {"value": value, "bar": TARGETS[key], "met": value >= TARGETS[key],
                            "possible": rows[baseline]["time_s"] / tcp_bound_s >= TARGETS[key],
                            "interval": interval(medians[baseline] / medians["owd"])}
        verdict["of_ideal"] = {"value": mine["of_ideal"], "bar": TARGETS["of_ideal"],
                               "met": mine["of_ideal"] >= TARGETS["of_ideal"],
                               "possible": mine["ideal_time_s"] / tcp_ideal_s >= TARGETS["of_ideal"],
                               "interval": interval(mine["ideal_time_s"] / medians["owd"])}
        verdicts.append(verdict)
    return verdicts


def standby_share(runs) -> float | None:
    """Of the bytes the runs' subflows carried, the share their standbys carried (None: not recorded)."""
    jobs = [j for r in runs for j in r.jobs if "standby_bytes" in j]
    total = sum(j["bytes"] for j in jobs)
    return round(sum(j["standby_bytes"] for j in jobs) / total, 3) if total else None


def outside(runs) -> dict:
    """The outside traffic's median rate over the runs (Mbit/s), and the median share of its rate
    alone that it kept (None: no elephants, or an older report)."""
    pairs = [(r.outside_mbps, r.outside_alone_mbps) for r in runs if r.outside_mbps is not None]
    kept = [during / alone for during, alone in pairs if alone]
    return {"outside_mbps": round(statistics.median(d for d, _ in pairs), 3) if pairs else None,
            "outside_kept": round(statistics.median(kept), 3) if kept else None}


def median_steal(runs) -> float | None:
    shares = [r.cpu_steal for r in runs if r.cpu_steal is not None]
    return round(statistics.median(shares), 3) if shares else None
