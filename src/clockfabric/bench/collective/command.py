"""`clockfabric bench allreduce` and `bench alltoall`: one collective benchmark on a lab that is
up, one set of options, nccl-tests' columns with the busbw that link rates allow beside them.
Also the option parsers the contention benchmark shares (--rcvbuf, comma lists)."""

from __future__ import annotations

import sys

import typer

from clockfabric.bench.harness import BENCHMARKS
from clockfabric.console import err, print_json, progress_bar, require_root
from clockfabric.errors import ClockfabricError

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
    lines = [f"# {COLLECTIVES[collective]} ({res.algorithm}): {len(res.hosts)} ranks on {res.fleet} "
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


def _planes(text: str | None) -> tuple[int, ...] | None:
    items = _list(text, "--planes", int)
    return None if items is None else tuple(items)


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
    if not res.ok:  # a failed run, not a usage error: exit 1, as a failing test does
        err.print(f"[red]error:[/] {what} gave wrong results ({sum(r.wrong for r in res.rows)} elements); "
                  "see #wrong")
        raise typer.Exit(1)


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
                                           help="Each subflow's receive window, fixed, like 16K (default 0: the "
                                                "kernel's autotuning)."),
                rcvbuf_budget: str = typer.Option("0", "--rcvbuf-budget",
                                                  help="With learned placement and the hosts' agents up: what the "
                                                       "subflows on one spine from under a leaf share, each instead "
                                                       "of --rcvbuf, like 240K (default 0: none)."),
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
                                    planes=_planes(planes), scheduler=scheduler, placement=placement,
                                    rcvbuf=_rcvbuf(rcvbuf), rcvbuf_budget=_rcvbuf(rcvbuf_budget), standby=standby,
                                    iters=iters, warmup=warmup, timeout_s=timeout)
        _bench_collective(options, lab_name, hosts, _sizes(sizes, min_bytes, max_bytes, factor), as_json)

    command.__doc__ = doc
    command.__name__ = collective
    return command


allreduce = BENCHMARKS.register("allreduce")(_collective_command(
    "allreduce", "ring", "ring, or hier (groups by leaf).", "Hosts in ring order, comma-separated (default: all).",
    "All-reduce between lab hosts over TCP subflows pinned to planes; nccl-tests' columns."))
alltoall = BENCHMARKS.register("alltoall")(_collective_command(
    "alltoall", "pairwise", "pairwise (n-1 steps, one peer each way) or oneshot (every peer at once).",
    "Hosts in rank order, comma-separated (default: all).",
    "All-to-all between lab hosts over TCP subflows pinned to planes; nccl-tests' columns. Sizes are bytes per "
    "rank's send buffer, rounded down to a multiple of 4 x hosts."))
