"""Lab bring-up and tear-down time for 8, 32 and 64 hosts (dual-plane, 2 spines per plane).

Ours: clockfabric.lab.build.up / down (one process, netlink sockets opened inside each
namespace). Baseline, in the same run and from the same plan (interfaces(), routing_tables(),
COMMON_SYSCTLS / SWITCH_SYSCTLS, the htb + bfifo of shaping.py): one `ip` / `tc` / `sysctl`
process per operation, the way a shell script builds such a lab. Both labs must answer a ping
from h0 to the last host, and on the first run of each size their routes, addresses, links,
qdiscs and h0's htb class must match, before their times count.

Tear-down has two clocks. `down` is the call itself; the kernel then dismantles the namespaces
asynchronously (cleanup_net), and /run/netns is already empty when down() returns, so
"netns gone" only confirms that. "released" waits for the kernel: before tear-down one probe
veth pair is cabled from a separate observer namespace into every lab namespace, and the lab
counts as released when the kernel has destroyed all of them (it does so while dismantling
each lab namespace, after the lab's own devices and qdiscs are unregistered).

    sudo clockfabric bench lab-bringup [--sizes 8,32,64] [--repeat 3] [--out PATH]
"""

from __future__ import annotations

import math
import os
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from clockfabric.bench import harness
from clockfabric.bench.bringup.baseline import (
    BenchError,
    baseline_down,
    baseline_plan,
    baseline_up,
    compare,
    fingerprint,
)
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, record
from clockfabric.console import require_root
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build, netns
from clockfabric.lab.naming import netns_name, netns_prefix
from clockfabric.topology import Topology, multirail, routing_tables

OURS, BASE, PROBE = "bench-up-{}", "benchbase-{}", "benchprobe-{}"  # lab names; namespaces cf.<lab>.<node>
OUR_PREFIXES = tuple(netns_prefix(p.format("")).rstrip(".") for p in (OURS, BASE, PROBE))  # cf.bench-up- ...
PLANES, SPINES = 2, 2
UP_TARGET_S, DOWN_TARGET_S, TARGET_HOSTS = 20.0, 10.0, 64
BASELINE_FULL_REPEAT_MAX_HOSTS = 32  # larger baselines run once: they are the slow side
RELEASE_TIMEOUT_S = 120.0
DEFAULT_JSON = RESULTS / "lab-bringup.json"

out = Console()
if not out.is_terminal:
    out = Console(width=160)  # a log or a pipe: keep the table's columns readable
err = Console(stderr=True)


def ours_present() -> list[str]:
    return [n for n in netns.listed("cf.") if n.startswith(OUR_PREFIXES)]


def leaves_for(hosts: int) -> int:
    return max(2, hosts // 16)


def last_host(topo: Topology):
    return list(topo.hosts.values())[-1]


def ping(src_ns: str, addr: str, what: str) -> None:
    p = subprocess.run(["ip", "netns", "exec", src_ns, "ping", "-c1", "-W2", addr], capture_output=True, text=True)
    if p.returncode != 0:
        raise BenchError(f"{what}: ping {src_ns} -> {addr} got no answer, so its times would mean nothing:\n"
                         f"{(p.stdout + p.stderr).strip()}")


# ---- probes: when has the kernel really dismantled a set of namespaces? ---------------------------
class Probes:
    def __init__(self, name: str, targets: list[str]):
        self.ns = netns_name(name, "obs")
        netns.create(self.ns)
        self.ipr = netns.ipr(self.ns)
        for i, target in enumerate(targets):
            fd = os.open(netns.NETNS_DIR / target, os.O_RDONLY)
            try:
                self.ipr.link("add", ifname=f"probe{i}", kind="veth", peer={"ifname": "cfprobe", "net_ns_fd": fd})
            finally:
                os.close(fd)

    def left(self) -> int:
        return sum(1 for ln in self.ipr.get_links() if (ln.get("ifname") or "").startswith("probe"))

    def wait(self, t0: float) -> float | None:
        """Seconds from t0 until every probe is gone (None if that took over RELEASE_TIMEOUT_S)."""
        while self.left():
            if time.perf_counter() - t0 > RELEASE_TIMEOUT_S:
                return None
            time.sleep(0.005)
        return time.perf_counter() - t0

    def close(self) -> None:
        self.ipr.close()
        netns.remove(self.ns)


def wait_gone(prefix: str, t0: float) -> float:
    while netns.listed(prefix):
        time.sleep(0.002)
    return time.perf_counter() - t0


# ---- one size ----------------------------------------------------------------------------------
def run_size(hosts: int, repeat: int, base_repeat: int, bar: Progress, overall, stage) -> dict:
    topo = multirail(hosts, PLANES, leaves_for(hosts), SPINES)
    ours_lab, base_lab, probe_lab = OURS.format(hosts), BASE.format(hosts), PROBE.format(hosts)
    target = str(last_host(topo).address)
    res: dict[str, Any] = {
           "hosts": hosts, "planes": PLANES, "leaves_per_plane": leaves_for(hosts), "spines_per_plane": SPINES,
           "namespaces": len(topo.nodes()), "links": len(topo.links),
           "routes": sum(len(r) for r in routing_tables(topo).values()),
           "baseline_commands": len(baseline_plan(topo, base_lab)),
           "ours": {k: [] for k in ("up_s", "down_s", "netns_gone_s", "released_s", "phases_s")},
           "baseline": {k: [] for k in ("up_s", "down_s", "netns_gone_s", "released_s")},
           "equivalence": "not checked"}
    ours_fp = None

    def label(text: str) -> None:
        bar.update(stage, description=f"{hosts:>2} hosts: {text}", completed=0, total=None)

    marks: dict[str, float] = {}  # stage -> when it finished, for the run in progress

    def progress(st: str, done: int, total: int) -> None:
        marks[st] = time.perf_counter()
        bar.update(stage, description=f"{hosts:>2} hosts: clockfabric up, {st}", completed=done, total=total)

    for r in range(max(repeat, base_repeat)):
        if r < repeat:  # ---- clockfabric
            label(f"clockfabric up (run {r + 1}/{repeat})")
            marks.clear()
            t0 = time.perf_counter()
            lab = build.up(topo, ours_lab, progress=progress)
            res["ours"]["up_s"].append(time.perf_counter() - t0)
            prev, phases = t0, {}
            for st, t in marks.items():
                phases[st], prev = t - prev, t
            res["ours"]["phases_s"].append(phases)
            label("ping check (clockfabric)")
            ping(lab.ns("h0"), target, f"clockfabric lab {ours_lab}")
            if ours_fp is None:
                label("recording the clockfabric lab's state")
                ours_fp = fingerprint(ours_lab, topo)
            probes = Probes(probe_lab, netns.listed(netns_prefix(ours_lab)))
            try:
                label("clockfabric down")
                t0 = time.perf_counter()
                build.down(ours_lab)
                res["ours"]["down_s"].append(time.perf_counter() - t0)
                res["ours"]["netns_gone_s"].append(wait_gone(netns_prefix(ours_lab), t0))
                label("waiting for the kernel to release the clockfabric lab")
                res["ours"]["released_s"].append(probes.wait(t0))
            finally:
                probes.close()
            bar.advance(overall)
        if r < base_repeat:  # ---- baseline
            base_probes: Probes | None = None
            try:
                label(f"baseline up, one process per operation (run {r + 1}/{base_repeat})")
                t0 = time.perf_counter()
                baseline_up(topo, base_lab,
                            lambda d, t: bar.update(stage, completed=d, total=t))
                res["baseline"]["up_s"].append(time.perf_counter() - t0)
                label("ping check (baseline)")
                ping(netns_name(base_lab, "h0"), target, f"baseline lab {base_lab}")
                if res["equivalence"] == "not checked":
                    label("comparing baseline with clockfabric lab")
                    if ours_fp is not None:
                        compare(ours_fp, fingerprint(base_lab, topo), hosts)
                        res["equivalence"] = "routes, addresses, links, qdiscs, h0 htb class identical"
                base_probes = Probes(probe_lab, netns.listed(netns_prefix(base_lab)))
                label("baseline down (ip netns del per namespace)")
                t0 = time.perf_counter()
                baseline_down(base_lab)
                res["baseline"]["down_s"].append(time.perf_counter() - t0)
                res["baseline"]["netns_gone_s"].append(wait_gone(netns_prefix(base_lab), t0))
                label("waiting for the kernel to release the baseline lab")
                res["baseline"]["released_s"].append(base_probes.wait(t0))
            finally:
                baseline_down(base_lab)  # always, even after a failure or Ctrl-C
                if base_probes is not None:
                    base_probes.close()
            bar.advance(overall)

    for side in ("ours", "baseline"):
        for key in ("up_s", "down_s", "netns_gone_s", "released_s"):
            vals = [v for v in res[side][key] if v is not None]
            res[side][key.replace("_s", "_median_s")] = statistics.median(vals) if vals else None
        res[side]["runs"] = len(res[side]["up_s"])
    res["speedup_up"] = _ratio(res["baseline"]["up_median_s"], res["ours"]["up_median_s"])
    res["speedup_down"] = _ratio(res["baseline"]["down_median_s"], res["ours"]["down_median_s"])
    res["speedup_released"] = _ratio(res["baseline"]["released_median_s"], res["ours"]["released_median_s"])
    return res


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


# ---- report ------------------------------------------------------------------------------------
def machine() -> dict:
    ip_v = subprocess.run(["ip", "-V"], capture_output=True, text=True).stdout.strip()
    try:
        import pyroute2
        pr2 = pyroute2.__version__
    except Exception:  # noqa: BLE001 - informational only
        pr2 = "unknown"
    return {**harness.machine(), "iproute2": ip_v, "pyroute2": pr2}


def targets(results: list[dict], judged: dict) -> list[Target]:
    """At TARGET_HOSTS: up and down times, each against the baseline's at the same size."""
    at = next((r for r in results if r["hosts"] == TARGET_HOSTS), None)
    if at is None or not judged:
        return []
    base = at["baseline"]
    return [Target(f"{TARGET_HOSTS} hosts up", judged["up_s"], UP_TARGET_S, "s", better="lower",
                   baseline=base["up_median_s"]),
            Target(f"{TARGET_HOSTS} hosts down", judged["down_s"], DOWN_TARGET_S, "s", better="lower"),
            Target(f"{TARGET_HOSTS} hosts down until the kernel released them", judged["released_s"],
                   DOWN_TARGET_S, "s", better="lower", baseline=base["released_median_s"])]


def fmt(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    return (f"{x:.3f}" if x < 1 else f"{x:.2f}" if x < 100 else f"{x:.0f}") + unit


def exponent(results: list[dict], side: str) -> float | None:
    """k in time ~ hosts^k, from the smallest and largest size."""
    pts = [(r["hosts"], r[side]["up_median_s"]) for r in results if r[side]["up_median_s"]]
    if len(pts) < 2 or pts[0][0] == pts[-1][0]:
        return None
    (h0, t0), (h1, t1) = pts[0], pts[-1]
    return math.log(t1 / t0) / math.log(h1 / h0)


def report(results: list[dict], notes: list[str]) -> dict:
    table = Table(title=f"Lab bring-up / tear-down, dual-plane, {SPINES} spines per plane "
                        "(median seconds; ratio = baseline / clockfabric)")
    for col in ("hosts", "namespaces", "links", "runs\ncf/base", "clockfabric\nup", "baseline\nup",
                "speedup\nup", "clockfabric\ndown", "clockfabric\ndown→released", "baseline\ndown→released",
                f"{TARGET_HOSTS}-host targets"):
        table.add_column(col, justify="right")
    targets = {}
    for r in results:
        o, b = r["ours"], r["baseline"]
        verdict = ""
        if r["hosts"] == TARGET_HOSTS:
            up_ok = o["up_median_s"] is not None and o["up_median_s"] < UP_TARGET_S
            down_ok = o["down_median_s"] is not None and o["down_median_s"] < DOWN_TARGET_S
            rel_ok = o["released_median_s"] is not None and o["released_median_s"] < DOWN_TARGET_S
            targets = {"up_s": o["up_median_s"], "up_target_s": UP_TARGET_S, "up_met": up_ok,
                       "down_s": o["down_median_s"], "down_target_s": DOWN_TARGET_S, "down_met": down_ok,
                       "released_s": o["released_median_s"], "down_met_including_release": rel_ok}
            verdict = (f"up<{UP_TARGET_S:.0f}s {'[green]met' if up_ok else '[red]MISSED'}[/], "
                       f"down<{DOWN_TARGET_S:.0f}s {'[green]met' if down_ok and rel_ok else '[red]MISSED'}[/]")
        table.add_row(str(r["hosts"]), str(r["namespaces"]), str(r["links"]), f"{o['runs']}/{b['runs']}",
                      fmt(o["up_median_s"]), fmt(b["up_median_s"]),
                      fmt(r["speedup_up"], "×"), fmt(o["down_median_s"]), fmt(o["released_median_s"]),
                      fmt(b["released_median_s"]), verdict)
    out.print(table)
    growth = {r["hosts"]: r["ours"]["up_median_s"] / r["hosts"] for r in results if r["ours"]["up_median_s"]}
    base_growth = {r["hosts"]: r["baseline"]["up_median_s"] / r["hosts"]
                   for r in results if r["baseline"]["up_median_s"]}
    k_ours, k_base = exponent(results, "ours"), exponent(results, "baseline")
    out.print("growth, clockfabric up per host: "
              + ", ".join(f"{h} hosts {1000 * v:.1f} ms" for h, v in growth.items())
              + (f"; up time ~ hosts^{k_ours:.2f}" if k_ours is not None else ""))
    out.print("growth, baseline up per host:    "
              + ", ".join(f"{h} hosts {1000 * v:.1f} ms" for h, v in base_growth.items())
              + (f"; up time ~ hosts^{k_base:.2f}" if k_base is not None else ""))
    for r in results:
        ph = r["ours"]["phases_s"]
        if ph:
            med = {k: statistics.median(p.get(k, 0.0) for p in ph) for k in ph[0]}
            out.print(f"{r['hosts']:>2} hosts, clockfabric up by stage (median s): "
                      + ", ".join(f"{k} {v:.3f}" for k, v in med.items() if k != "done")
                      + f"; cf down() {fmt(r['ours']['down_median_s'])} s, /run/netns empty after "
                      + f"{fmt(r['ours']['netns_gone_s'] and statistics.median(r['ours']['netns_gone_s']))} s; "
                      + f"baseline: {r['baseline_commands']} processes, down {fmt(r['baseline']['down_median_s'])} s")
    for n in notes:
        out.print(f"note: {n}")
    return {"targets": targets,
            "growth": {"ours_up_per_host_s": growth, "baseline_up_per_host_s": base_growth,
                       "ours_up_exponent": k_ours, "baseline_up_exponent": k_base}}


# ---- main --------------------------------------------------------------------------------------
def cleanup(labs: list[str]) -> list[str]:
    for lab in labs:
        try:
            build.down(lab)  # namespaces and the lab's record under /run/clockfabric
        except Exception as e:  # noqa: BLE001 - keep cleaning
            err.print(f"cleanup: clockfabric lab down {lab}: {e}")
    for ns in ours_present():
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    return ours_present()


@BENCHMARKS.register("lab-bringup")
def main(sizes: str = typer.Option("8,32,64", help="Host counts, comma-separated."),
         repeat: int = typer.Option(3, min=1, help="Runs per size (baseline: 1 above 32 hosts)."),
         json_path: Path = typer.Option(DEFAULT_JSON, "--out", help="Where the record goes.")) -> None:
    """Lab bring-up and tear-down at 8-64 hosts, against the same lab built with one ip/tc process per step."""
    require_root()
    try:
        size_list = sorted({int(s) for s in sizes.split(",") if s.strip()})
        if not size_list or min(size_list) < 2:
            raise ValueError
    except ValueError:
        raise ClockfabricError(f"--sizes {sizes!r}: give host counts of at least 2, comma-separated, "
                               "e.g. --sizes 8,32,64") from None
    for tool in ("ip", "tc", "ping"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            raise ClockfabricError(f"{tool} is not installed; apt-get install iproute2 iputils-ping")

    def on_term(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    leftover = ours_present()
    if leftover:
        err.print(f"removing {len(leftover)} namespaces left by an earlier run of this benchmark")
        cleanup([OURS.format(s) for s in size_list])
    info = machine()
    notes = []
    plan = [(h, repeat, repeat if h <= BASELINE_FULL_REPEAT_MAX_HOSTS else 1) for h in size_list]
    for h, _, b in plan:
        if b < repeat:
            notes.append(f"baseline at {h} hosts ran once (--repeat 1 above {BASELINE_FULL_REPEAT_MAX_HOSTS} hosts) "
                         "to cap the run time; its median is that one run")
            err.print(f"[yellow]{notes[-1]}")
    notes.append("'down→released' = from the start of tear-down until the kernel has destroyed a probe veth "
                 "cabled into every namespace (one extra veth per namespace); /run/netns is empty as soon as "
                 "down() returns, so the 'netns gone' time equals down() and is kept in the JSON only")
    results: list[dict] = []
    status, code = "ok", 0
    try:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err, transient=True) as bar:
            overall = bar.add_task("all runs", total=sum(r + b for _, r, b in plan))
            stage = bar.add_task("", total=None)
            for h, r, b in plan:
                results.append(run_size(h, r, b, bar, overall, stage))
    except KeyboardInterrupt:
        status, code = "interrupted", 130
        err.print("interrupted; cleaning up")
    except (BenchError, ClockfabricError) as e:
        status, code = f"failed: {e}", 1
        err.print(f"[red]benchmark failed:[/] {e}")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not stop the cleanup
        left = cleanup([OURS.format(h) for h in size_list])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if left:
            err.print(f"[red]could not remove {len(left)} namespaces: {', '.join(left[:5])}; "
                      f"try: ip netns del NAME")
            code = code or 1
    summary = report(results, notes) if results else {}
    data = {"benchmark": "lab_bringup", "status": status, "machine": info,
            "params": {"sizes": size_list, "repeat": repeat, "planes": PLANES, "spines_per_plane": SPINES,
                       "leaves": "max(2, hosts // 16)",
                       "baseline_repeat": {h: b for h, _, b in plan}},
            "results": results, **summary, "notes": notes}
    record("lab-bringup", targets(results, summary.get("targets", {})), info, data, path=json_path)
    err.print(f"results written to {json_path}")
    raise typer.Exit(code)
