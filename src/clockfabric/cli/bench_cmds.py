"""`clockfabric bench ...`: benchmarks on a lab they build and remove (failover, contention), or
on a lab that is up (allreduce, alltoall: one collective benchmark, one set of options, one table)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer
from rich.table import Table

from clockfabric.cli.output import err, out, print_json, progress_bar, require_root
from clockfabric.errors import ClockfabricError

app = typer.Typer(help="Benchmarks, each against a baseline or an expectation in the same run.",
                  no_args_is_help=True)


def _fmt(value, suffix: str = "") -> str:
    return "-" if value is None else f"{value:g}{suffix}"


@app.command()
def failover(scenarios: str = typer.Option("flap-1s,flap-20s,flap-120s,spine-silent,flaps-10,isolated",
                                           "--scenarios", help="Comma-separated scenarios to run."),
             agents: str = typer.Option("both", "--agents", help="Run with agents: both, on or off."),
             timeouts: str = typer.Option("30s,default", "--timeouts",
                                          help="Collective timeouts to run: 30s (like RDMA), default (gloo's)."),
             soak: float = typer.Option(0.0, "--soak", help="Instead: this many seconds on a healthy fabric under "
                                                           "background TCP, counting false reroutes."),
             hold_down: float = typer.Option(5.0, "--hold-down", help="The agents' hold-down, seconds."),
             script: Path = typer.Option(Path("examples/ddp_train.py"), "--script", help="The DDP job."),
             out_dir: Path = typer.Option(Path("bench/results"), "--out", help="Where JSON and job logs go."),
             as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts.")) -> None:
    """A real DDP job through link and NIC failures, without and with the agents."""
    from clockfabric.bench import failover as fb

    require_root()
    modes = {"both": [False, True], "on": [True], "off": [False]}.get(agents)
    if modes is None:
        raise ClockfabricError(f"--agents must be both, on or off (got {agents!r})")
    chosen_timeouts = [t.strip() for t in timeouts.split(",") if t.strip()]
    if bad := [t for t in chosen_timeouts if t not in fb.TIMEOUTS]:
        raise ClockfabricError(f"--timeouts: {bad[0]!r} is not one of {', '.join(fb.TIMEOUTS)}")
    started = time.monotonic()

    def progress(line: str) -> None:
        err.print(f"[dim]{time.monotonic() - started:6.0f}s[/] {line}", highlight=False)

    if soak > 0:
        report = fb.soak(soak, out_dir=out_dir, hold_down_s=hold_down, progress=progress)
        if as_json:
            print_json(report)
        else:
            out.print(f"soak {soak:g} s: {report['moves']} reroutes on a healthy fabric; "
                      f"decisions {report['decisions'] or 'none'}; throughput {report['throughput_mbps']} Mbit/s")
            for e in report["traffic_errors"]:
                err.print(f"[yellow]background traffic: {e}")
        return
    report = fb.run([s.strip() for s in scenarios.split(",") if s.strip()], agent_modes=modes,
                    timeouts=chosen_timeouts, out_dir=out_dir, script=script, hold_down_s=hold_down,
                    progress=progress)
    if as_json:
        print_json(report)
        return
    table = Table(title=f"failover: DDP job on 4 hosts, no-failure training {report['baseline']['training_s']:.1f} s, "
                        f"median step {report['baseline']['median_step_s']:.3f} s")
    for col in ("scenario", "agents", "timeout", "outcome", "detection", "reroute", "worst step / median",
                "training / no-failure", "longest stall", "moves"):
        table.add_column(col)
    for r in report["runs"]:
        table.add_row(r["scenario"], "on" if r["agent"] else "off", r["timeout"], r["outcome"],
                      _fmt(r["detection_s"], " s"), _fmt(r["reroute_s"], " s"), _fmt(r["worst_step_over_median"], "x"),
                      _fmt(r["total_over_baseline"], "x"), _fmt(r["longest_stall_s"], " s"), str(r["moves"]))
    out.print(table)
    err.print(f"JSON and job logs in {out_dir}")


@app.command()
def contention(scenarios: str = typer.Option("none,two-alltoall,two-allreduce,elephants,degraded", "--scenarios",
                                             help="Comma-separated scenarios to run."),
               schedulers: str = typer.Option("ecmp,least-outstanding,owd", "--schedulers",
                                              help="Comma-separated schedulers to compare."),
               seeds: int = typer.Option(5, "--seeds", help="Runs per scenario and scheduler (fresh ECMP draws)."),
               size: str = typer.Option("4M", "--size", help="Bytes per rank's buffer."),
               iters: int = typer.Option(12, "--iters",
                                         help="Timed iterations per run, after --warmup. The defaults take "
                                              "45-90 minutes a lab; --warmup 2 --iters 4 --seeds 3 about a "
                                              "quarter of that, with noisier medians (docs/benchmarks.md)."),
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
               rcvbuf: str = typer.Option("32K", "--rcvbuf",
                                          help="Each subflow's receive buffer, fixed (0: the kernel's autotuning, "
                                               "whose windows overflow the lab's FIFOs)."),
               rcvbuf_budget: str = typer.Option("192K", "--rcvbuf-budget",
                                                 help="What the subflows that the agents placed on one spine share "
                                                      "(learned placement: owd's), each instead of --rcvbuf "
                                                      "(0: none)."),
               placement: str = typer.Option(None, "--placement",
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
            report = cb.rejudge(json.loads(from_file.read_text()))
        except (OSError, ValueError) as e:
            raise ClockfabricError(f"cannot read the report {from_file}: {e}") from None
        _print_contention(report, as_json)
        return
    chosen, sched = _list(scenarios, "--scenarios"), _list(schedulers, "--schedulers")
    nbytes = parse_size(size)
    rcvbuf_bytes, budget_bytes = _rcvbuf(rcvbuf), _rcvbuf(rcvbuf_budget)
    mtu = mtu or cb.MTU
    cb.check(chosen, sched, seeds, iters, subflows, fabric, placement, spines, rcvbuf_bytes, mtu, budget_bytes,
             warmup)
    require_root()
    started = time.monotonic()

    def progress(line: str) -> None:
        err.print(f"[dim]{time.monotonic() - started:6.0f}s[/] {line}", highlight=False)

    report = cb.run(scenarios=chosen, schedulers=sched, seeds=seeds, size=nbytes, iters=iters, subflows=subflows,
                    fabric=fabric, placement=placement, spines=spines, rcvbuf=rcvbuf_bytes, mtu=mtu,
                    rcvbuf_budget=budget_bytes, warmup=warmup, standby=standby, progress=progress)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(json.dumps(report, indent=1) + "\n")
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
    """owd against the issue's bars, one row per scenario: each cell the value, whether it is
    met, short, or out of reach (no scheduler could: the baseline ran that close to ideal), and
    its 90% bootstrap interval over the seeds."""
    table = Table(title="owd against its targets",
                  caption="out of reach: the baseline ran within that ratio of the ideal at TCP's "
                          "ceiling (with elephants: of all of their spine); none: owd's time over the best baseline's, at most 1.03; "
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


# ---- collectives: all-reduce, all-to-all ------------------------------------------------------
BUS_FORMULA = {"allreduce": "algbw * 2(n-1)/n", "alltoall": "algbw * (n-1)/n"}
REDOP = {"allreduce": "sum", "alltoall": "none"}  # as nccl-tests prints them


def _sizes(sizes: str | None, min_bytes: str | None, max_bytes: str | None, factor: float | None) -> list[int]:
    from clockfabric.collective.sizes import parse_size, size_range

    if sizes is not None:
        if min_bytes or max_bytes or factor:
            raise ClockfabricError("give either --sizes or --min-bytes/--max-bytes/--factor, not both")
        out_sizes = [parse_size(s) for s in sizes.split(",") if s.strip()]
        if not out_sizes:
            raise ClockfabricError("--sizes is empty; write it like --sizes 1M,8M")
        return out_sizes
    low, high = parse_size(min_bytes or "1M"), parse_size(max_bytes or "64M")
    return size_range(low, high, 2.0 if factor is None else factor)


def _nccl_table(res) -> str:
    """nccl-tests' columns, plain fixed-width text, with the expectation beside them."""
    from clockfabric.collective.results import COLLECTIVES
    from clockfabric.collective.sizes import format_size

    collective = res.collective
    planes = ", ".join(map(str, res.planes))
    head = f"# {'size':>10} {'count':>12} {'type':>6} {'redop':>6} {'time':>12} {'algbw':>9} {'busbw':>9} "
    units = f"# {'(B)':>10} {'(elements)':>12} {'':>6} {'':>6} {'(us)':>12} {'(GB/s)':>9} {'(GB/s)':>9} "
    lines = [f"# {COLLECTIVES[collective]} ({res.algorithm}): {len(res.hosts)} ranks on lab {res.lab} "
             + f"({', '.join(res.hosts)})",
             f"# {res.subflows} subflow(s) per peer pair on plane(s) {planes}; time: the slowest rank, mean of "
             + f"{res.iters} iterations after {res.warmup} warmup",
             f"# scheduler {res.scheduler}, source ports {res.placement}",
             f"# GB = 1e9 B; busbw = {BUS_FORMULA[collective]}; expected busbw from link rates "
             + f"{res.expected_busbw_gbps:.4f} GB/s",
             "#",
             head + f"{'#wrong':>7} {'expected':>9} {'busbw/':>9}",
             units + f"{'':>7} {'(GB/s)':>9} {'expected':>9}"]
    for r in res.rows:
        lines.append(f"  {r.size_bytes:>10} {r.count:>12} {'float':>6} {REDOP[collective]:>6} {r.time_us:>12.1f} "
                     f"{r.algbw_gbps:>9.4f} {r.busbw_gbps:>9.4f} {r.wrong:>7} {res.expected_busbw_gbps:>9.4f} "
                     f"{res.ratio(r):>9.2f}   ({format_size(r.size_bytes)})")
    return "\n".join(lines) + "\n"


def _rcvbuf(text: str) -> int | None:
    """--rcvbuf (or another buffer option): bytes, or None for "0" (CollectiveOptions says what is too small)."""
    from clockfabric.collective.sizes import parse_size

    return None if text.strip() == "0" else parse_size(text)


def _list(text: str | None, what: str, cast=str) -> list | None:
    if text is None:
        return None
    try:
        items = [cast(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        example = "0,1" if cast is int else "h0,h1"
        raise ClockfabricError(f"{what} {text!r} does not parse; write it like {example}") from None
    if not items:
        raise ClockfabricError(f"{what} is empty")
    return items


def _bench_collective(options, lab_name: str | None, hosts: str | None, sizes: list[int], as_json: bool) -> None:
    from clockfabric.collective.results import COLLECTIVES
    from clockfabric.collective.run import run_collective
    from clockfabric.lab.state import Lab

    what = COLLECTIVES[options.collective]
    require_root()
    lab = Lab.open(lab_name)
    host_list = _list(hosts, "--hosts") or list(lab.topology.hosts)
    with progress_bar(what) as bar:
        res = run_collective(lab, host_list, options, sizes=sizes, progress=bar)
    if as_json:
        print_json(res.as_dict())
        return
    sys.stdout.write(_nccl_table(res))
    if not res.ok:
        raise ClockfabricError(f"{what} gave wrong results ({sum(r.wrong for r in res.rows)} elements); "
                               "see #wrong")


def _collective_command(collective: str, default_algorithm: str, algorithm_help: str, hosts_help: str, doc: str):
    """One CLI verb per collective, with the same options: typer reads them from this signature."""

    def command(lab_name: str = typer.Option(None, "--lab", "-l",
                                             help="Lab name (default: the only lab that is up)."),
                hosts: str = typer.Option(None, "--hosts", help=hosts_help),
                subflows: int = typer.Option(1, "--subflows", help="TCP connections per peer pair."),
                planes: str = typer.Option(None, "--planes", help="Planes the subflows take in turn, like 0,1 "
                                                                 "(default: every plane the hosts share)."),
                algorithm: str = typer.Option(default_algorithm, "--algorithm", help=algorithm_help),
                scheduler: str = typer.Option("ecmp", "--scheduler", "-s",
                                              help="Which subflow carries each chunk: ecmp, least-outstanding, "
                                                   "owd."),
                placement: str = typer.Option(None, "--placement",
                                              help="Source ports: hashed (the kernel's) or learned (one per spine "
                                                   "path); default learned for owd, hashed otherwise."),
                rcvbuf: str = typer.Option("0", "--rcvbuf",
                                           help="Each subflow's receive buffer, fixed, like 16K (default 0: the "
                                                "kernel's autotuning)."),
                rcvbuf_budget: str = typer.Option("0", "--rcvbuf-budget",
                                                  help="With learned placement and the hosts' agents up: what the "
                                                       "subflows on one spine from under a leaf share, each instead "
                                                       "of --rcvbuf, like 192K (default 0: none)."),
                standby: bool = typer.Option(False, "--standby",
                                             help="With learned placement: beside each subflow on a spine, a standby "
                                                  "at work while traffic from outside the jobs crowds it."),
                min_bytes: str = typer.Option(None, "--min-bytes", "-b", help="Smallest size (default 1M)."),
                max_bytes: str = typer.Option(None, "--max-bytes", "-e", help="Largest size (default 64M)."),
                factor: float = typer.Option(None, "--factor", "-f", help="Size step factor (default 2)."),
                sizes: str = typer.Option(None, "--sizes", help="Exact sizes instead, like 1M,8M."),
                iters: int = typer.Option(5, "--iters", "-n", help="Timed iterations per size."),
                warmup: int = typer.Option(1, "--warmup", "-w", help="Untimed iterations first."),
                timeout: float = typer.Option(60.0, "--timeout", help="Seconds any one wait may take."),
                as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts.")) -> None:
        from clockfabric.collective.options import CollectiveOptions

        # bad input fails here, fast, before root and the lab
        options = CollectiveOptions(collective=collective, algorithm=algorithm, subflows=subflows,
                                    planes=_list(planes, "--planes", int), scheduler=scheduler, placement=placement,
                                    rcvbuf=_rcvbuf(rcvbuf), rcvbuf_budget=_rcvbuf(rcvbuf_budget), standby=standby,
                                    iters=iters, warmup=warmup, timeout_s=timeout)
        _bench_collective(options, lab_name, hosts, _sizes(sizes, min_bytes, max_bytes, factor), as_json)

    command.__doc__ = doc
    command.__name__ = collective
    return command


allreduce = app.command("allreduce")(_collective_command(
    "allreduce", "ring", "ring, or hier (groups by leaf).", "Hosts in ring order, comma-separated (default: all).",
    "All-reduce between lab hosts over TCP subflows pinned to planes; nccl-tests' columns."))
alltoall = app.command("alltoall")(_collective_command(
    "alltoall", "pairwise", "pairwise (n-1 steps, one peer each way) or oneshot (every peer at once).",
    "Hosts in rank order, comma-separated (default: all).",
    "All-to-all between lab hosts over TCP subflows pinned to planes; nccl-tests' columns. Sizes are bytes per "
    "rank's send buffer, rounded down to a multiple of 4 x hosts."))
