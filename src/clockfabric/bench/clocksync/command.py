"""Clock sync accuracy, convergence and overhead on leaf-spine labs, against two baselines.

For each lab size (8 hosts: 2 leaves x 2 spines; 32 hosts: 4 x 4; 200 Mbit/s links, virtual
host clocks with offsets up to ±50 ms and drifts up to ±100 ppm, `lab up`'s defaults) each
scenario runs one `clockfabric sync --json`: it starts an agent on every host and
linuxptp ptp4l beside them, and judges ours, the NTP-style baseline (min-RTT/2 on the same
probes) and ptp4l against the lab's ground truth, in the same run, so all three share lab
and load.

The scenarios, what each one loads or does, and what is watched beside `sync`: scenario.py.

    sudo clockfabric bench clocksync [--sizes 8,32] [--scenarios A,R,P] [--seconds 20] [--out PATH]
                                     [--lab-prefix csbench] [--repeats N]
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from clockfabric.bench import harness
from clockfabric.bench.clocksync import faults
from clockfabric.bench.clocksync.report import PEERS, STEP, WINDOW_S, machine, report, targets, verdicts
from clockfabric.bench.clocksync.scenario import (
    ALL_RATE,
    EVERY_HOST_LOADED,
    HOST_RATE,
    LOADED_REF_RATE,
    ORDER,
    PRIORITIZED,
    SPINE_RATE_C,
    STARTUP_PER_HOST_S,
    STARTUP_S,
    run_scenario,
)
from clockfabric.bench.clocksync.traffic import UDP_SHARE, BenchError, cleanup, cli, leftovers, stop_traffic
from clockfabric.bench.clocksync.watch import Fabric
from clockfabric.bench.harness import BENCHMARKS, RESULTS, record
from clockfabric.console import err, out, require_root
from clockfabric.errors import ClockfabricError
from clockfabric.lab.naming import check_lab_name
from clockfabric.lab.state import lab_names

DEFAULT_JSON = RESULTS / "clocksync.json"
LAB_PREFIX = "csbench"  # then the hosts, and "p" for the lab with traffic classes
SHAPES = {8: (2, 2), 32: (4, 4)}  # hosts: (leaves, spines)


# ---- one lab ---------------------------------------------------------------------------------
def lab_name(prefix: str, hosts: int, classes: bool) -> str:
    return check_lab_name(f"{prefix}-{hosts}{'p' if classes else ''}")


def run_size(name: str, hosts: int, classes: bool, keys: list[str], seconds: float, bar: Progress, overall,
             stage_id, results: list[dict], failures: list[str], repeats: int = 1) -> None:
    leaves, spines = SHAPES.get(hosts, (max(2, hosts // 8), max(2, hosts // 8)))
    bar.update(stage_id, description=f"{hosts:>2} hosts: lab up")
    with tempfile.TemporaryDirectory(prefix="clockfabric-bench-") as scratch:  # the lab keeps its own copy
        path = Path(scratch) / f"{name}.yaml"
        cli("topology", "generate", "leafspine", "--hosts", str(hosts), "--leaves", str(leaves), "--spines",
            str(spines), "--host-rate", HOST_RATE, "--name", name, "-o", str(path), *(["--classes"] if classes else []))
        cli("lab", "up", str(path), "--name", name, "--json")  # ±50 ms offsets, ±100 ppm drifts (defaults)
    try:
        fab = Fabric(name)
        startup_s = STARTUP_S + STARTUP_PER_HOST_S * hosts  # Python start-up of N agents on 2 cores
        for rep, key in ((rep, key) for rep in range(repeats) for key in keys):
            try:
                r = run_scenario(fab, key, seconds, startup_s, bar, stage_id)
                r.update({"leaves": leaves, "spines": spines, "traffic_classes": classes, "repeat": rep})
                results.append(r)
            except BenchError as e:
                failures.append(str(e))
                err.print(f"[red]{hosts} hosts, {key}: {e}")
                stop_traffic(fab.lab)
            bar.advance(overall)
    finally:
        bar.update(stage_id, description=f"{hosts:>2} hosts: lab down")
        cleanup([name])


# ---- main --------------------------------------------------------------------------------------
@BENCHMARKS.register("clocksync")
def main(sizes: str = typer.Option("8,32", help="Lab sizes (hosts), comma-separated: 8 and 32 are defined."),
         scenarios: str = typer.Option("A,B,D,J,R,C,C+,P", help="Scenarios: A idle, B udp80, C tcp-spine, "
                                       "C+ tcp-all, D step, J ddp-job, R ref-loaded, P prio-all; the faults R0 "
                                       "ref-loaded-first, K ref-killed, L2 two-loaded, S hand-step, F fast-clock."),
         repeats: int = typer.Option(1, min=1, max=20, help="Run each scenario this many times; targets are "
                                                             "judged on the worst repeat, and the spread reported."),
         limit_sizes: str = typer.Option("8", "--all-saturated-sizes",
                                         help="Sizes that also run C+, P and J (load on every host)."),
         seconds: float = typer.Option(20.0, min=10, help="Seconds each sync runs beyond the agents' "
                                                           "start-up allowance (8 s + 1 s per host, x2 under load)."),
         quick: bool = typer.Option(False, "--quick", help="8 hosts, idle and UDP only."),
         prefix: str = typer.Option(LAB_PREFIX, "--lab-prefix",
                                    help="Name prefix of the labs it builds (and removes if left over): "
                                         "two runs at once need different ones."),
         json_path: Path = typer.Option(DEFAULT_JSON, "--out", help="Where the record goes.")) -> None:
    """Clock sync on 8- and 32-host labs, idle and loaded, against NTP-style and ptp4l in the same run."""
    run(sizes, scenarios, repeats, limit_sizes, seconds, quick, prefix, json_path, record_as="clocksync")


def run(sizes: str, scenarios: str, repeats: int, limit_sizes: str, seconds: float, quick: bool, prefix: str,
        json_path: Path, *, record_as: str) -> None:
    """`main`'s run, recorded under `record_as` (its section of docs/benchmarks.md) at `json_path`."""
    require_root()
    for tool in ("ip", "tc", "iperf3", "ptp4l"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            raise ClockfabricError(f"{tool} is not installed; run: make setup (iproute2, iperf3, linuxptp)")
    try:
        size_list = [8] if quick else sorted({int(s) for s in sizes.split(",") if s.strip()})
        all_sat = {int(s) for s in limit_sizes.split(",") if s.strip()}
        keys = ["A", "B"] if quick else [k for k in ORDER if k in {s.strip().upper() for s in scenarios.split(",")}]
        if not size_list or min(size_list) < 8 or not keys:
            raise ValueError
    except ValueError:
        raise ClockfabricError("--sizes: host counts of at least 8 (e.g. 8,32); "
                               "--scenarios: some of A,B,C,C+,D,R,P,J,R0,K,L2,S,F") from None

    def on_term(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    plan = [(h, classes, ks) for h in size_list for classes in (False, True)
            if (ks := [k for k in keys if (k in PRIORITIZED) == classes
                       and (k not in EVERY_HOST_LOADED or h in all_sat)])]
    names = [lab_name(prefix, h, classes) for h, classes, _ in plan]
    if stale := [n for n in names if n in lab_names()]:
        err.print(f"removing labs left by an earlier run: {', '.join(stale)}")
        cleanup(stale)
    info = machine()
    results: list[dict] = []
    failures: list[str] = []
    status, code = "ok", 0
    started = time.monotonic()
    try:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=err, transient=True) as bar:
            overall = bar.add_task("all scenarios", total=repeats * sum(len(k) for *_, k in plan))
            stage = bar.add_task("", total=None)
            for name, (h, classes, ks) in zip(names, plan, strict=True):
                run_size(name, h, classes, ks, seconds, bar, overall, stage, results, failures, repeats)
    except KeyboardInterrupt:
        status, code = "interrupted", 130
        err.print("interrupted; cleaning up")
    except (BenchError, Exception) as e:  # noqa: BLE001 - report, clean, write what we have
        status, code = f"failed: {e}", 1
        err.print(f"[red]benchmark failed:[/] {e!r}")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not stop the cleanup
        left = cleanup(names)
        procs = leftovers(names)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if left or procs:
            err.print(f"[red]left behind: labs {left}, processes {procs[:5]}")
            code = code or 1
    if failures and status == "ok":
        status, code = f"{len(failures)} scenario(s) failed", 1
    info = {**harness.finish(info), "wall_s": time.monotonic() - started}
    checks = faults.across_repeats(verdicts(results) + faults.verdicts(results)) + faults.spread(results)
    if results:
        report(results, checks)
    for f in failures:
        out.print(f"[red]failed:[/] {f}")
    data = {"benchmark": record_as, "status": status, "machine": info,
            "params": {"sizes": size_list, "shapes": {h: SHAPES.get(h) for h in size_list}, "host_rate": HOST_RATE,
                       "max_offset": "50ms", "max_drift_ppm": 100.0, "peers": PEERS, "window_s": WINDOW_S,
                       "seconds_beyond_startup": seconds, "udp_share": UDP_SHARE, "spine_rate_c": SPINE_RATE_C,
                       "all_rate": ALL_RATE, "loaded_reference_rate": LOADED_REF_RATE, "step": STEP,
                       "quick": quick, "scenarios": keys, "repeats": repeats},
            "results": results, "targets": checks, "failures": failures}
    record(record_as, targets(checks), info, data, path=json_path)
    err.print(f"results written to {json_path} ({info['wall_s'] / 60:.1f} min)")
    raise typer.Exit(code)
