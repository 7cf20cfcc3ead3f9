"""`clockfabric bench contention`: its options, and its report as tables."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table

from clockfabric.bench.collective.command import _list, _rcvbuf
from clockfabric.bench.harness import BENCHMARKS, Target, machine, record
from clockfabric.console import err, out, print_json, require_root
from clockfabric.errors import ClockfabricError


def _fmt(value, suffix: str = "") -> str:
    return "-" if value is None else f"{value:g}{suffix}"


def targets(verdicts: list[dict]) -> list[Target]:
    """owd's verdicts (summary.judge) as the harness's targets, for the record."""
    names = {"vs_ecmp": ("owd over ecmp", "x"), "vs_least_outstanding": ("owd over least-outstanding", "x"),
             "of_ideal": ("owd of the ideal", "")}
    found = []
    for v in verdicts:
        if v["scenario"] == "none":
            found.append(Target("none: owd's time over the best baseline's", v["over_best_baseline"], v["bar"],
                                "x", better="lower", interval=v["interval"]))
            continue
        for key, (name, unit) in names.items():
            if key in v:
                t = v[key]
                found.append(Target(f"{v['scenario']}: {name}", t["value"], t["bar"], unit, interval=t["interval"],
                                    possible=t["possible"]))
    return found


@BENCHMARKS.register("contention")
def contention(scenarios: str = typer.Option("none,two-alltoall,two-allreduce,elephants,degraded", "--scenarios",
                                             help="Comma-separated scenarios to run."),
               schedulers: str = typer.Option("ecmp,least-outstanding,owd", "--schedulers",
                                              help="Comma-separated schedulers to compare."),
               seeds: int = typer.Option(5, "--seeds", help="Runs per scenario and scheduler (fresh ECMP draws)."),
               size: str = typer.Option("4M", "--size", help="Bytes per rank's buffer."),
               iters: int = typer.Option(12, "--iters",
                                         help="Timed iterations per run, after --warmup. The defaults take "
                                              "45-90 minutes a lab; --warmup 2 --iters 4 --seeds 3 about a "
                                              "quarter of that, with noisier medians "
                                              "(docs/notes/2026-11-23-contention.md)."),
               warmup: int = typer.Option(5, "--warmup",
                                          help="Untimed iterations per run first, from the jobs' common start "
                                               "into their steady state."),
               subflows: int = typer.Option(None, "--subflows",
                                            help="TCP connections per peer pair, for every scheduler "
                                                 "(default: one per spine path: the spines, times 2 planes "
                                                 "on dualplane)."),
               fabric: str = typer.Option("leafspine", "--fabric", help="leafspine, or dualplane (2 planes)."),
               spines: int = typer.Option(2, "--spines", help="Spines of the leafspine fabric: 2, 3 or 4."),
               mtu: int = typer.Option(None, "--mtu",
                                       help="Every cable's MTU: 1500, or 9000 (jumbo frames, as AI fabrics run); "
                                            "port buffers hold the same bytes at either (default 1500)."),
               rcvbuf: str = typer.Option("40K", "--rcvbuf",
                                          help="Each subflow's receive window, fixed (0: the kernel's autotuning, "
                                               "whose windows overflow the lab's FIFOs)."),
               rcvbuf_budget: str = typer.Option("240K", "--rcvbuf-budget",
                                                 help="What the subflows that the agents placed on one spine share "
                                                      "(learned placement: owd's), each instead of --rcvbuf "
                                                      "(0: none)."),
               placement: str = typer.Option("", "--placement",
                                             help="Source ports for every scheduler: hashed or learned (default: "
                                                  "learned for owd, hashed for the baselines, as each ships)."),
               standby: bool = typer.Option(True, "--standby/--no-standby",
                                            help="Subflows on learned ports get a standby on their spine, at work "
                                                 "while traffic from outside the jobs crowds it."),
               out_file: Path = typer.Option(Path("bench/results/contention.json"), "--out",
                                             help="Where the JSON report goes."),
               from_file: Path = typer.Option(None, "--from",
                                              help="Run nothing: read a report this command wrote and judge "
                                                   "its runs again (the other options are ignored)."),
               as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts.")) -> None:
    """The schedulers where flows collide, on an 8-host leaf-spine lab it builds and removes."""
    import json

    from clockfabric.bench import contention as cb
    from clockfabric.collective.sizes import parse_size

    if from_file is not None:
        try:
            saved = json.loads(from_file.read_text())
            report = cb.rejudge(saved.get("report") or saved)  # a record, or a report from before records
        except (OSError, ValueError) as e:
            raise ClockfabricError(f"cannot read the report {from_file}: {e}") from None
        _print_contention(report, as_json)
        return
    chosen, sched = _list(scenarios, "--scenarios"), _list(schedulers, "--schedulers")
    nbytes = parse_size(size)
    rcvbuf_bytes, budget_bytes = _rcvbuf(rcvbuf), _rcvbuf(rcvbuf_budget)
    mtu = mtu or cb.MTU
    plan = cb.Plan(scenarios=tuple(chosen), schedulers=tuple(sched), seeds=seeds, size=nbytes, iters=iters,
                   subflows=subflows, fabric=fabric, spines=spines, mtu=mtu, placement=placement,
                   rcvbuf=rcvbuf_bytes, rcvbuf_budget=budget_bytes, warmup=warmup, standby=standby)
    require_root()
    started = time.monotonic()

    def progress(line: str) -> None:
        err.print(f"[dim]{time.monotonic() - started:6.0f}s[/] {line}", highlight=False)

    facts = machine()
    report = cb.run(plan, progress=progress)
    record("contention", targets(report["targets"]), facts, report, path=out_file)
    _print_contention(report, as_json)
    err.print(f"JSON in {out_file}")


def _print_contention(report: dict, as_json: bool) -> None:
    from clockfabric.collective.sizes import format_size

    if as_json:
        print_json(report)
        return
    lab, rcvbuf, budget = report["lab"], report["rcvbuf_bytes"], report["rcvbuf_budget_bytes"]
    table = Table(title=f"contention ({lab['fabric']}): 8 hosts, 2 leaves, {lab['spines']} spines, MTU {lab['mtu']}; "
                        f"{format_size(report['size_bytes'])} per rank, {report['subflows']} subflows "
                        f"({format_size(rcvbuf) if rcvbuf else 'autotuned'} receive buffers"
                        f"{f', {format_size(budget)} shared per spine' if budget else ''}), "
                        f"{report['warmup']}+{report['iters']} iterations, median of {report['seeds']} seeds; "
                        f"ports: {report['placement']}"
                        + ("" if report.get("standby", False) else "; no standbys")
                        + (f"; elephants: TCP {report.get('elephant_congestion', 'the host default')}"
                           if any(r["scenario"] == "elephants" for r in report["summary"]) else ""),
                  caption="time: the median seed's (the fastest-slowest seed's); vs l-o: against least-outstanding; "
                          "of TCP: of the ideal at TCP/IP's ceiling (headers and acks); "
                          "ecmp/ideal: the most any scheduler could gain over ecmp; "
                          "standby: of the bytes, the share standby subflows carried")
    for col in ("scenario", "scheduler", "time", "busbw", "vs ecmp", "vs l-o", "of ideal", "of TCP", "ecmp/ideal",
                "standby", "#wrong"):
        table.add_column(col, justify="left" if col in ("scenario", "scheduler") else "right", no_wrap=True)
    for r in report["summary"]:
        lo, hi = r["time_range_s"]
        table.add_row(r["scenario"], r["scheduler"], f"{r['time_s']:.2f} s ({lo:.2f}-{hi:.2f})",
                      f"{r['busbw_gbps'] * 1e3:.2f} MB/s",
                      _fmt(r["speedup_vs_ecmp"], "x"), _fmt(r["speedup_vs_least_outstanding"], "x"),
                      f"{r['of_ideal']:.2f}", f"{r['of_tcp_ideal']:.2f}", _fmt(r["ecmp_over_ideal"], "x"),
                      "-" if r.get("on_standbys") is None else f"{r['on_standbys']:.0%}", str(r["wrong"]))
    out.print(table)
    if any(r.get("outside_mbps") is not None for r in report["summary"]):
        out.print(_outside_table(report["summary"]))
    if report["targets"]:
        out.print(_targets_table(report["targets"]))
    if report["cpu_steal"]:
        err.print(f"CPU steal during the runs: {report['cpu_steal']:.0%} median (the hypervisor's; "
                  "the transport is Python, so steal slows every scheduler)")


def _outside_table(summary: list[dict]) -> Table:
    """What each scheduler's job left the traffic outside it (the elephants)."""
    table = Table(title="the elephants while the job ran",
                  caption="rate: all elephants' together, the median run's; kept: of their rate alone just before "
                          "each run, the median run's")
    for col in ("scenario", "scheduler", "rate", "kept"):
        table.add_column(col, justify="left" if col in ("scenario", "scheduler") else "right", no_wrap=True)
    for r in summary:
        if r.get("outside_mbps") is not None:
            table.add_row(r["scenario"], r["scheduler"], f"{r['outside_mbps']:.1f} Mbit/s",
                          "-" if r["outside_kept"] is None else f"{r['outside_kept']:.0%}")
    return table


def _targets_table(verdicts: list[dict]) -> Table:
    """owd against its bars, one row per scenario: each cell the value, whether it is
    met, short, or out of reach (no scheduler could: the baseline ran that close to ideal), and
    its 90% bootstrap interval over the seeds."""
    table = Table(title="owd against its targets",
                  caption="out of reach: the baseline ran within that ratio of the ideal at TCP's "
                          "ceiling (with elephants: of all of their spine); "
                          "none: owd's time over the best baseline's, at most 1.03; "
                          "(low-high): 90% of the ratio's values over the seeds resampled")
    for col in ("scenario", "vs ecmp >= 1.5x", "vs l-o >= 1.2x", "of ideal >= 0.90"):
        table.add_column(col, justify="left" if col == "scenario" else "right", no_wrap=True)

    def cell(v: dict | None, suffix: str = "") -> str:
        if v is None:
            return "-"
        word = "met" if v["met"] else "short" if v["possible"] else "out of reach"
        return f"{v['value']:.2f}{suffix} {word}{_spread(v['interval'])}"

    for v in verdicts:
        if v["scenario"] == "none":
            over = "-" if v["over_best_baseline"] is None else f"{v['over_best_baseline']:.2f}x"
            table.add_row("none", f"{over} of best {'met' if v['met'] else 'short'}{_spread(v['interval'])}", "", "")
            continue
        table.add_row(v["scenario"], cell(v.get("vs_ecmp"), "x"), cell(v.get("vs_least_outstanding"), "x"),
                      cell(v["of_ideal"]))
    return table


def _spread(interval: list[float] | None) -> str:
    return "" if interval is None else f" ({interval[0]:.2f}-{interval[1]:.2f})"
