"""`clockfabric bench clocksync`: the fault scenarios, and judging a scenario over repeats.

  R0 ref-loaded-first  R's load (the reference's host link at 25 Mbit/s, a Reno flow each way
                       through it) started before the agents: no solve ever saw it quiet.
  K  ref-killed        idle; once every host is within 1 µs (and BEFORE_S more) the reference's
                       agent, the one that solves, is SIGKILLed (`sync --survive-death`).
  L2 two-loaded        R's load on two hosts at once (the second host of each of the first two
                       leaves, never the reference), each trading with a partner on the next
                       leaf, started once every host is within 1 µs (and BEFORE_S more).
  S  hand-step         idle; then (as K) the last host's clock is stepped by +50 ms (`lab clock step`),
                       as a person setting it by hand would.
  F  fast-clock        idle; then (as K) the last host's clock runs at 500 ppm from that moment, without
                       a step (`lab clock rate`), as a failing oscillator would.

Each is judged from its event (the load's start, the kill, the step, the rate change; R0 from
convergence): the quiet hosts' p99 (in no flow, not the faulted host, not the reference) and
their published bound against it; whether global time left the line it kept for the 10 s
before the event (a step or a bend of the ensemble); how soon a loaded host is named; how
soon the faulted host is back within 1 µs. With --repeats N every target is judged on the
worst repeat, each repeat's figure in its note, and the spread of the headline p99 (the worst
repeat's over the best's) is a target of its own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time

import numpy as np

from clockfabric.bench.clocksync.report import QUIET_MAX_NS, RECONVERGE_WINDOWS, WINDOW_S, quiet_hosts, sec
from clockfabric.bench.clocksync.traffic import BenchError, cli, loaded_hosts
from clockfabric.bench.clocksync.watch import BOUND_NS, Fabric, Watch, proc_ticks

HAND_STEP, FAST_PPM = "50ms", 500.0
SCENARIOS = {
    "R0": ("ref-loaded-first", "the reference's link at 25mbit, saturated both ways by TCP before the agents start"),
    "K": ("ref-killed", "idle; the reference's agent (the solver) SIGKILLed once converged"),
    "L2": ("two-loaded", "two hosts' links at 25mbit, each saturated both ways by TCP once converged"),
    "S": ("hand-step", f"idle; one host's clock stepped by +{HAND_STEP} once converged"),
    "F": ("fast-clock", f"idle; one host's clock runs at {FAST_PPM:.0f} ppm from once converged"),
}
ORDER = ["R0", "L2", "K", "S", "F"]
HOST_LOADED = {"R", "R0", "L2"}  # their loaded hosts' own links slowed (traffic.loaded_hosts)
EVENTS = {"K", "S", "F"}  # a fault fired mid-run
LINE_JUDGED = EVENTS | {"L2"}  # global time's line is judged across the event (R0 has no quiet before)
# global time's line is fitted over this long before the event, which waits that long after
# convergence: over 3 s a line's slope is off by ~150 ppb from the samples' noise alone (seen at
# 32 hosts), and 50 s on that is 7 us
BEFORE_S = 10.0
BOUND_RATIO_MAX, SPREAD_MAX = 5.0, 2.0  # quiet hosts' bound p50 over their p99; worst repeat's p99 over best's


def settle_s(key: str, default_s: float) -> float:
    """From convergence to the scenario's event: where global time's line is judged, the line's
    window (BEFORE_S); elsewhere `default_s`."""
    return BEFORE_S if key in LINE_JUDGED else default_s


def sync_args(key: str) -> list[str]:
    return ["--survive-death"] if key == "K" else []


def restore_rates(fab: Fabric) -> list[str]:
    """Every host's clock back at its own rate (without a step) before a scenario: the scenarios
    of a size share one lab, and a host that F left at FAST_PPM would otherwise start every
    later scenario fast, F's next repeat too, whose fault would then change nothing. Returns
    the hosts set back."""
    moved = {h: c for h, c in sorted(fab.lab.clocks().items()) if c.drift_now_ppm != c.drift_ppm}
    for c in moved.values():
        fab.lab.save_clock(c.with_rate(time.time_ns(), c.drift_ppm))
    return list(moved)


def fire(fab: Fabric, key: str, t: float) -> dict:
    """The fault, now: which host, what, and when (seconds into the run, real ns)."""
    host = fab.reference if key == "K" else fab.hosts[-1]
    if key == "K":
        pid = int(json.loads((fab.lab.dir / "agents" / f"{host}.json").read_text())["pid"])
        if proc_ticks(pid, host) is None:
            raise BenchError(f"pid {pid} is not {host}'s agent any more: nothing killed")
        real = time.time_ns()
        os.kill(pid, signal.SIGKILL)
        return {"host": host, "what": "agent SIGKILLed", "at_s": t, "real_ns": real}
    if key == "S":
        cli("lab", "clock", "step", host, HAND_STEP, "--lab", fab.lab.name)
        return {"host": host, "what": f"clock stepped +{HAND_STEP}", "at_s": t,
                "real_ns": fab.lab.clocks()[host].steps[-1][0]}
    cli("lab", "clock", "rate", host, str(FAST_PPM), "--lab", fab.lab.name)
    return {"host": host, "what": f"clock at {FAST_PPM:.0f} ppm", "at_s": t,
            "real_ns": fab.lab.clocks()[host].rates[-1][0]}


def line_departure(series: list[tuple[float, float]], at_s: float, before_s: float = BEFORE_S,
                   from_s: float = 0.0) -> float | None:
    """How far (ns) a (seconds, value) series strays after at_s from the line fitted to its
    last before_s before (none before from_s: global time is the reference's clock until the
    fleet has converged): a step or a bend shows, a steady rate does not."""
    pre = [(t, v) for t, v in series if max(at_s - before_s, from_s) <= t < at_s]
    post = [(t, v) for t, v in series if t >= at_s]
    if len(pre) < 3 or not post:
        return None
    slope, icept = np.polyfit([t - at_s for t, _ in pre], [v for _, v in pre], 1)
    return float(max(abs(v - (icept + slope * (t - at_s))) for t, v in post))


def judge(res: dict, watch: Watch, fab: Fabric, key: str, load_at: float | None, fault: dict | None) -> None:
    """The fault scenarios' figures, from the moment each is judged from."""
    if key not in SCENARIOS:
        return
    loaded = loaded_hosts(fab, key)
    since = fault["at_s"] if fault else load_at if load_at is not None else watch.steady_from()
    busy = {h for f in res["flows"] for h in (f["src"], f["dst"])} | {fab.reference, *loaded}
    if fault:
        busy.add(fault["host"])
    quiet = res["quiet_hosts"] = quiet_hosts(watch.errors, since, busy)
    pooled = [abs(e) for t, _, h, e in watch.errors if t >= since and h in quiet["hosts"]]
    bounds = [b for t, h, b in watch.bounds if t >= since and h in quiet["hosts"]]
    p99 = float(np.percentile(pooled, 99)) if pooled else None
    res["quiet_bound"] = {"p99_ns": p99, "bound_p50_ns": float(np.median(bounds)) if bounds else None,
                          "ratio": float(np.median(bounds)) / max(p99, 1.0) if bounds and p99 is not None else None}
    res["judged_from_s"], res["fault"] = since, fault
    if loaded:  # from its load's start; R0's load was there before the agents, so from every agent up
        named = [watch.named_after(h, load_at if load_at is not None else watch.agents_up_s or 0.0) for h in loaded]
        late = [n["after_s"] for n in named]
        res["loaded_named"] = {"hosts": loaded, "after_s": None if None in late else max(late),
                               "reasons": [n["reason"] for n in named]}
    if key in LINE_JUDGED:  # the run's samples, not those taken while its agents are stopped
        run = [(t, v) for t, v in watch.ensemble if t <= res["sync_seconds"]]
        # from when the load began to start: the watcher does not sample while it starts
        res["ensemble_departure_ns"] = line_departure(run, res.get("load_began_s", since), from_s=watch.steady_from())
    if fault and key in ("S", "F"):
        res["resync"] = {k: v for k, v in watch.reconvergence(fault["host"], fault["real_ns"]).items() if k != "series"}


def verdicts(results: list[dict]) -> list[dict]:
    """The fault scenarios' targets, one row per result (repeats merged by across_repeats)."""
    rows = []

    def add(r, target, value, ok, note=""):
        rows.append({"hosts": r["hosts"], "scenario": f"{r['scenario']} {r['name']}", "target": target,
                     "value": value, "met": ok, "note": note})

    for r in (r for r in results if r["scenario"] in SCENARIOS):
        q, qb = r["quiet_hosts"], r["quiet_bound"]
        add(r, f"quiet hosts' worst p99 <= {QUIET_MAX_NS:.0f} ns from the event", _ns(q["worst_p99_ns"]),
            q["worst_p99_ns"] is not None and q["worst_p99_ns"] <= QUIET_MAX_NS,
            f"{len(q['hosts'])} quiet hosts, worst max {_ns(q['worst_max_ns'])}")
        add(r, f"quiet hosts' bound p50 <= {BOUND_RATIO_MAX:.0f}x their p99 error", _x(qb["ratio"]),
            qb["ratio"] is not None and qb["ratio"] <= BOUND_RATIO_MAX,
            f"bound p50 {_ns(qb['bound_p50_ns'])}, p99 error {_ns(qb['p99_ns'])}")
        if "loaded_named" in r:
            n = r["loaded_named"]
            add(r, "loaded hosts all named unsynced within 10 s", f"{sec(n['after_s'])} s",
                n["after_s"] is not None and n["after_s"] <= 10.0, "; ".join(str(x) for x in n["reasons"]))
        if "ensemble_departure_ns" in r:
            d = r["ensemble_departure_ns"]
            add(r, f"global time off its line before the event <= {BOUND_NS:.0f} ns", _ns(d),
                d is not None and d <= BOUND_NS, "max, from the event to the end of the run")
        if "resync" in r:
            rs = r["resync"].get("reconverged_s")
            add(r, f"faulted host back under 1 µs (2 s on end) <= {RECONVERGE_WINDOWS * WINDOW_S:.0f} s after",
                f"{sec(rs)} s", rs is not None and rs <= RECONVERGE_WINDOWS * WINDOW_S,
                f"{r['fault']['what']} on {r['fault']['host']}; max error after "
                f"{_ns(r['resync'].get('max_error_after_step_ns'))}")
    return rows


def headline_p99(r: dict) -> float | None:
    """The p99 a scenario is known by: its quiet hosts' where it has them, else all hosts'."""
    q = r.get("quiet_hosts") or {}
    return q.get("worst_p99_ns") if "worst_p99_ns" in q else r["methods"]["clockfabric"].get("p99_ns")


def spread(results: list[dict]) -> list[dict]:
    """Per (hosts, scenario) run more than once: each repeat's headline p99 and the worst over
    the best (None where a repeat has none: that is as bad as a spread gets)."""
    groups: dict[tuple[int, str], list[dict]] = {}
    for r in results:
        groups.setdefault((r["hosts"], f"{r['scenario']} {r['name']}"), []).append(r)
    rows = []
    for (hosts, scenario), rs in groups.items():
        if len(rs) < 2:
            continue
        p99 = [headline_p99(r) for r in rs]
        known = [v for v in p99 if v is not None]
        ratio = max(known) / max(min(known), 1.0) if known and len(known) == len(p99) else None
        rows.append({"hosts": hosts, "scenario": scenario, "target": f"worst repeat's p99 <= {SPREAD_MAX:.0f}x "
                     "the best's", "value": _x(ratio), "met": ratio is not None and ratio <= SPREAD_MAX,
                     "note": f"{len(rs)} repeats, p99 (ns): " + ", ".join(_ns(v) for v in p99)})
    return rows


def across_repeats(checks: list[dict]) -> list[dict]:
    """Rows of the same (hosts, scenario, target) from several repeats as one: judged on the
    worst repeat (met only if every repeat met it), every repeat's figure in the note."""
    groups: dict[tuple, list[dict]] = {}
    for c in checks:
        groups.setdefault((c["hosts"], c["scenario"], c["target"]), []).append(c)
    merged = []
    for (*_, target), cs in groups.items():
        if len(cs) == 1:
            merged.append(cs[0])
            continue
        worst = _worst(target, cs)
        merged.append({**worst, "met": all(c["met"] for c in cs),
                       "note": f"worst of {len(cs)} repeats: " + ", ".join(c["value"] for c in cs)
                       + (f"; {worst['note']}" if worst["note"] else "")})
    return merged


def _worst(target: str, cs: list[dict]) -> dict:
    """The repeat furthest on the wrong side: one without a figure, then a missed one by its figure."""
    figures = [(_figure(c["value"]), c) for c in cs]
    if unknown := [c for v, c in figures if v is None]:
        return unknown[0]
    known = [(v or 0.0, c) for v, c in figures]
    missed = [(v, c) for v, c in known if not c["met"]] or known
    pick = min if ">=" in target else max
    return pick(missed, key=lambda vc: vc[0])[1]


def _figure(value: str) -> float | None:
    m = re.match(r"-?[\d,.]+", value)
    try:
        return float(m[0].replace(",", "")) if m else None
    except ValueError:
        return None


def _ns(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} ns"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"

