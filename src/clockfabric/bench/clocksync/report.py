"""`clockfabric bench clocksync`: its targets, the verdicts on them, and its tables."""

from __future__ import annotations

import re
import subprocess

import numpy as np
from rich.table import Table

from clockfabric.bench import harness
from clockfabric.bench.harness import Target
from clockfabric.console import out

STEP = "1ms"


PEERS, WINDOW_S = 10, 2.0


# targets
IDLE_P99_NS, LOADED_P99_NS, RATIO_MIN = 500.0, 1_000.0, 10.0
JOB_P99_NS = 2_000.0  # scenario J: a DDP job on every host, one FIFO a port


# every agent running (first published state) to every host within 1 us; from `sync` start the
# time also holds N agents' Python start-up on this machine's cores, the lab's cost and not the
# sync's (a fleet's agents start on hosts of their own): reported in the note, not judged
CONVERGE_S, RECONVERGE_WINDOWS = 5.0, 2


PROBE_SHARE_MAX, CPU_MAX_PCT, CPU_PEERS = 0.001, 2.0, 10


COVERAGE_MIN = 0.99  # share of samples in which a host's published bound holds its true error
IDLE_BOUND_P50_NS = 1_000.0  # scenario A: a bound an OWD can be judged by
QUIET_MAX_NS, NAMED_WITHIN_S = 2_000.0, 10.0  # scenario R: the quiet hosts; naming the loaded reference




# ---- report ----------------------------------------------------------------------------------
def ns(v) -> str:
    return "-" if v is None else f"{v:,.0f}"


def sec(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def verdicts(results: list[dict]) -> list[dict]:
    out_ = []

    def add(r, target, value, ok, note=""):
        out_.append({"hosts": r["hosts"], "scenario": f"{r['scenario']} {r['name']}", "target": target,
                     "value": value, "met": ok, "note": note})

    for r in results:
        ours = r["methods"]["clockfabric"]["p99_ns"]
        limit = r["scenario"] == "C+"
        if r["scenario"] == "A":
            add(r, f"p99 <= {IDLE_P99_NS:.0f} ns after convergence", f"{ns(ours)} ns",
                ours is not None and ours <= IDLE_P99_NS)
        if r["scenario"] in ("B", "C", "C+", "P"):
            note = "honest limit, not expected to pass" if limit else ""
            add(r, f"p99 <= {LOADED_P99_NS:.0f} ns under load", f"{ns(ours)} ns",
                ours is not None and ours <= LOADED_P99_NS, note)
            for b in ("ntp_min_rtt", "ptp4l"):
                ratio = r["ratio_p99"].get(b)
                add(r, f"{b} p99 / ours p99 >= {RATIO_MIN:.0f}", "-" if ratio is None else f"{ratio:.1f}x",
                    ratio is not None and ratio >= RATIO_MIN, note)
        if r["scenario"] == "J":
            job = r.get("job") or {}
            add(r, f"p99 <= {JOB_P99_NS:.0f} ns with a DDP job on every host", f"{ns(ours)} ns",
                ours is not None and ours <= JOB_P99_NS,
                f"{job.get('steps')} steps during sync, median step {1000 * (job.get('median_step_s') or 0):.0f} ms; "
                f"busiest host link {r['links']['host_util_max']:.0%} busy on average")
        if r["scenario"] == "R":
            quiet = r["quiet_hosts"]
            add(r, f"quiet hosts' worst p99 <= {QUIET_MAX_NS:.0f} ns once loaded", f"{ns(quiet['worst_p99_ns'])} ns",
                quiet["worst_p99_ns"] is not None and quiet["worst_p99_ns"] <= QUIET_MAX_NS,
                f"{len(quiet['hosts'])} quiet hosts; worst max {ns(quiet['worst_max_ns'])} ns")
            named = r.get("reference_named") or {}
            add(r, f"loaded reference named unsynced within {NAMED_WITHIN_S:.0f} s of the load starting",
                f"{sec(named.get('after_s'))} s", named.get("after_s") is not None
                and named["after_s"] <= NAMED_WITHIN_S, named.get("reason") or "never named")
        cover = (r.get("bound") or {}).get("coverage")
        add(r, f"bound covers |error| in >= {COVERAGE_MIN:.0%} of samples",
            "-" if cover is None else f"{100 * cover:.2f}%", cover is not None and cover >= COVERAGE_MIN,
            "" if cover is None else f"bound median {ns(r['bound']['bound_p50_ns'])} ns, "
                                     f"p99 {ns(r['bound']['bound_p99_ns'])} ns")
        bound_p50 = (r.get("bound") or {}).get("bound_p50_ns")
        if r["scenario"] == "A":
            add(r, f"bound p50 <= {IDLE_BOUND_P50_NS:.0f} ns", f"{ns(bound_p50)} ns",
                bound_p50 is not None and bound_p50 <= IDLE_BOUND_P50_NS, f"p99 error {ns(ours)} ns")
        if r["scenario"] not in ("C+", "R", "P"):  # saturated from the start: convergence is not the question
            after = r["converged_after_up_s"]
            add(r, f"converged within {CONVERGE_S:.0f} s of every agent running", f"{sec(after)} s",
                after is not None and after <= CONVERGE_S,
                f"from `sync` start: agents all up after {sec(r['agents_up_s'])} s, "
                f"converged after {sec(r['sync']['converged_s'])} s")
        if r["scenario"] == "D":
            rc = r["step"].get("reconverged_s")
            add(r, f"re-converged within {RECONVERGE_WINDOWS} windows ({RECONVERGE_WINDOWS * WINDOW_S:.0f} s) "
                   f"of a +{STEP} step", f"{sec(rc)} s",
                rc is not None and rc <= RECONVERGE_WINDOWS * WINDOW_S)
        if r["scenario"] in ("A", "B"):
            p = r["probes"]
            share, total = p["wire_max_share_of_link"], p["total_max_share_of_link"]
            add(r, f"probe traffic <= {PROBE_SHARE_MAX:.1%} of link rate (busiest host)",
                "-" if share is None else f"{share:.3%}", share is not None and share <= PROBE_SHARE_MAX,
                "" if total is None else f"with control messages {total:.3%} ({p['total_max_host']})")
            cpu = r["cpu"]["max_pct"]
            peers = min(PEERS, r["hosts"] - 1)
            add(r, f"agent CPU <= {CPU_MAX_PCT:.0f}% of a core ({peers} peers)",
                "-" if cpu is None else f"{cpu:.1f}% max, {r['cpu']['mean_pct']:.1f}% mean",
                cpu is not None and cpu <= CPU_MAX_PCT,
                "" if peers >= CPU_PEERS else f"target is stated for {CPU_PEERS} peers")
    return out_


def report(results: list[dict], checks: list[dict]) -> None:
    t = Table(title="Clock sync |error| against the lab's truth after convergence (ns); "
                    "ratio = baseline p99 / ours p99")
    for col in ("hosts", "scenario", "method", "p50", "p99", "max", "samples", "ratio p99"):
        t.add_column(col, justify="right")
    for r in results:
        for i, (mname, label) in enumerate((("clockfabric", "clockfabric"), ("ntp_min_rtt", "NTP-style"),
                                            ("ptp4l", "ptp4l"))):
            m = r["methods"].get(mname, {})
            ratio = r["ratio_p99"].get(mname)
            t.add_row(str(r["hosts"]) if i == 0 else "", f"{r['scenario']} {r['name']}" if i == 0 else "", label,
                      ns(m.get("p50_ns")), ns(m.get("p99_ns")), ns(m.get("max_ns")), str(m.get("samples", "-")),
                      "" if mname == "clockfabric" else "n/a (step)" if r["scenario"] == "D"
                      else ("-" if ratio is None else f"{ratio:.1f}×"),
                      end_section=i == 2)
    out.print(t)
    t = Table(title="Convergence, overhead, load (times from `sync` start; CPU and probes once converged)")
    for col in ("hosts", "scenario", "agents up", "converged\n(sync)", "converged\nafter up", "stats\nwindow",
                "probes / +control\n% of link, max", "agent CPU %\nmean / max / ref", "spine links\nqueued / full",
                "host dirs\nqueued / full",
                "machine\nload", "step: re-\nconverged"):
        t.add_column(col, justify="right")
    for r in results:
        p, c, lk = r["probes"], r["cpu"], r["links"]
        cpu = ("-" if c["mean_pct"] is None else
               f"{c['mean_pct']:.1f} / {c['max_pct']:.1f} / {c['reference_pct'] or 0:.1f}")
        t.add_row(str(r["hosts"]), f"{r['scenario']} {r['name']}", f"{sec(r['agents_up_s'])} s",
                  f"{sec(r['sync']['converged_s'])} s", f"{sec(r['converged_after_up_s'])} s",
                  f"{sec(r['sync']['stats_window_s'])} s",
                  "-" if p["wire_max_share_of_link"] is None else
                  f"{100 * p['wire_max_share_of_link']:.3f} / {100 * p['total_max_share_of_link']:.3f}",
                  cpu, f"{lk['fabric_links_queued']} / {lk['fabric_links_full']} of {lk['fabric_links']}",
                  f"{lk['host_directions_queued']} / {lk['host_directions_full']} of {lk['host_directions']}",
                  f"{r['machine_load']['loadavg_end'][0]} ({r['machine_load']['cpu_busy_pct']:.0f}% busy, "
                  f"PSI {r['machine_load']['cpu_pressure_some_avg60_pct'] or 0:.0f}%)",
                  f"{sec(r['step'].get('reconverged_s'))} s" if "step" in r else "")
    out.print(t)
    t = Table(title="Targets")
    for col in ("hosts", "scenario", "target", "value", "verdict", "note"):
        t.add_column(col)
    for v in checks:
        t.add_row(str(v["hosts"]), v["scenario"], v["target"], v["value"],
                  "[green]met" if v["met"] else "[red]MISSED", v["note"])
    out.print(t)


def machine() -> dict:
    ptp = subprocess.run(["ptp4l", "-v"], capture_output=True, text=True)
    iperf = subprocess.run(["iperf3", "--version"], capture_output=True, text=True).stdout.split("\n", 1)[0]
    return {**harness.machine(), "ptp4l": (ptp.stdout or ptp.stderr).strip(), "iperf3": iperf}


def quiet_hosts(errors: list[tuple[float, int, str, float]], since_s: float, busy: set[str]) -> dict:
    """The worst p99 and max |error| from since_s among the hosts in no flow (and not the
    reference), from the benchmark's own samples (t, real ns, host, error)."""
    per: dict[str, list[float]] = {}
    for t, _, h, e in errors:
        if t >= since_s and h not in busy:
            per.setdefault(h, []).append(abs(e))
    if not per:
        return {"hosts": [], "worst_p99_ns": None, "worst_max_ns": None, "worst_host": None, "samples": 0}
    p99 = {h: float(np.percentile(v, 99)) for h, v in per.items()}
    worst = max(p99, key=lambda h: p99[h])
    return {"hosts": sorted(per), "worst_p99_ns": p99[worst], "worst_max_ns": max(max(v) for v in per.values()),
            "worst_host": worst, "samples": sum(len(v) for v in per.values())}


def targets(checks: list[dict]) -> list[Target]:
    """verdicts() as the harness's targets: the figure and bar read back from their text."""
    found = []
    for v in checks:
        bar = re.search(r"(<=|>=|within) ([\d.]+)", v["target"])
        figure = re.match(r"-?[\d,.]+", v["value"])
        value = float(figure[0].replace(",", "")) if figure else None
        found.append(Target(f"{v['hosts']} hosts, {v['scenario']}: {v['target']}", value,
                            float(bar[2]) if bar else 0.0, better="higher" if bar and bar[1] == ">=" else "lower",
                            possible="not expected to pass" not in v["note"], note=v["note"]))
    return found
