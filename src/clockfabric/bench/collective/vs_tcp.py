"""`clockfabric bench allreduce-vs-tcp`: all-reduce busbw on a dual-plane lab: 1, 2, 4, 8
subflows per peer pair, ring and hier, against what link rates allow and against what kernel
TCP alone carries, in the same run.

The lab (default examples/dualplane-8.yaml: 8 hosts, 2 planes, 2 leaves x 2 spines per
plane, 100 Mbit/s links) is brought up by this script and always taken down. For each
subflow count, in turn:

  expected   clockfabric.collective.expected_busbw_gbps for the same hosts, subflows and
             planes: link rates only (see its docstring for the assumptions).
  tcp ring   the baseline: iperf3 flows along the same ring (host i -> host i+1), pinned to
             planes as the subflows are (per hop, one client per plane with -P subflows on
             that plane, bound NIC to NIC), all at once for --baseline-s seconds. Its busbw is
             the slowest hop's goodput: what the machine forwards for this pattern right now,
             with no collective logic at all.
  ring, hier clockfabric.collective.allreduce, each size, --iters timed iterations.

Every all-reduce result is checked element by element (#wrong must be 0).

    sudo clockfabric bench allreduce-vs-tcp [--sizes 1M,16M,64M] [--subflows 1,2,4,8]
         [--algorithms ring,hier] [--iters 3] [--out PATH]
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from clockfabric.bench import harness
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, labs_removed, record
from clockfabric.collective import allreduce, expected_busbw_gbps
from clockfabric.collective.expected import common_planes
from clockfabric.collective.sizes import format_size, parse_size
from clockfabric.console import require_root
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build
from clockfabric.lab.exec import command
from clockfabric.lab.state import Lab
from clockfabric.lab.traffic import iperf_server
from clockfabric.topology import Port, format_rate, interfaces, load, parse_rate

DEFAULT_JSON = RESULTS / "allreduce-vs-tcp.json"
IPERF_PORT = 5300  # + plane: one server per host and plane
EXPECTED_SHARE = 0.9  # of the busbw that link rates allow

out = Console()
if not out.is_terminal:
    out = Console(width=160)
err = Console(stderr=True)


def nic_address(lab: Lab, host: str, plane: int) -> str:
    topo = lab.topology
    return str(interfaces(topo)[Port(host, topo.hosts[host].nic_on(plane).name)].address.ip)


def tcp_ring(lab: Lab, hosts: list[str], subflows: int, planes: list[int], seconds: float) -> dict:
    """iperf3 along the ring, pinned like the subflows; per-hop goodput in GB/s."""
    per_plane = {p: sum(1 for j in range(subflows) if planes[j % len(planes)] == p) for p in planes}
    per_plane = {p: k for p, k in per_plane.items() if k}
    n = len(hosts)
    servers, clients = [], []
    try:
        for i in range(n):
            dst = hosts[(i + 1) % n]
            for p in per_plane:
                servers.append(iperf_server(lab, dst, nic_address(lab, dst, p), IPERF_PORT + p, once=True))
        for i in range(n):
            src, dst = hosts[i], hosts[(i + 1) % n]
            for p, k in per_plane.items():
                argv = ["iperf3", "-c", nic_address(lab, dst, p), "-B", nic_address(lab, src, p),
                        "-p", str(IPERF_PORT + p), "-P", str(k), "-t", str(seconds), "-J"]
                clients.append((i, subprocess.Popen(command(lab, src, argv), stdout=subprocess.PIPE,
                                                    stderr=subprocess.PIPE, text=True)))
        hop_bps = [0.0] * n
        for i, c in clients:
            stdout, stderr = c.communicate(timeout=seconds + 30)
            data = json.loads(stdout) if stdout.strip() else {}
            if "error" in data or "end" not in data:
                raise ClockfabricError(f"iperf3 from {hosts[i]} failed: {data.get('error') or stderr.strip()}")
            hop_bps[i] += data["end"]["sum_received"]["bits_per_second"]
    finally:
        for s in servers:
            if s.poll() is None:
                s.kill()
            s.wait()
        for _, c in clients:
            if c.poll() is None:
                c.kill()
                c.wait()
    hops = [b / 8 / 1e9 for b in hop_bps]
    return {"busbw_gbps": min(hops), "mean_hop_gbps": sum(hops) / n, "hop_gbps": hops}


def machine() -> dict:
    iperf = subprocess.run(["iperf3", "--version"], capture_output=True, text=True).stdout.split("\n", 1)[0]
    return {**harness.machine(), "iperf3": iperf}


def targets(rows: list[dict]) -> list[Target]:
    """At the largest size, per algorithm and subflow count: busbw of what the link rates allow,
    against iperf3 along the same ring (the baseline)."""
    largest = max((r["size_bytes"] for r in rows), default=None)
    return [Target(f"{r['algorithm']}, {r['subflows']} subflow(s), {format_size(r['size_bytes'])}: busbw of expected",
                   round(r["busbw_over_expected"], 3), EXPECTED_SHARE,
                   baseline=round(r["tcp_ring_busbw_gbps"] / r["expected_busbw_gbps"], 3)
                   if r["tcp_ring_busbw_gbps"] else None)
            for r in rows if r["size_bytes"] == largest]


@BENCHMARKS.register("allreduce-vs-tcp")
def main(topology: Path = typer.Option(Path("examples/dualplane-8.yaml"), help="Lab topology."),
         name: str = typer.Option("coll-bench", help="Name of the lab this benchmark brings up."),
         rate: str = typer.Option(None, help="Set every link to this rate, like 25mbit (default: the topology's)."),
         sizes: str = typer.Option("1M,16M,64M", help="Message sizes, comma-separated."),
         subflows: str = typer.Option("1,2,4,8", help="Subflow counts, comma-separated."),
         algorithms: str = typer.Option("ring,hier", help="Algorithms: ring, hier."),
         iters: int = typer.Option(3, min=1, help="Timed iterations per size."),
         warmup: int = typer.Option(1, min=0, help="Untimed iterations first."),
         baseline_s: float = typer.Option(6.0, "--baseline-s", help="Seconds of iperf3 per subflow count (0: none)."),
         json_path: Path = typer.Option(DEFAULT_JSON, "--out", help="Where the record goes.")) -> None:
    """All-reduce busbw (ring, hier; 1-8 subflows) against link rates and against plain TCP (iperf3) along the ring."""
    require_root()
    try:
        size_list = [parse_size(s) for s in sizes.split(",") if s.strip()]
        sub_list = [int(s) for s in subflows.split(",") if s.strip()]
        alg_list = [a.strip() for a in algorithms.split(",") if a.strip()]
        topo = load(topology)
        if rate:  # slower links: a fabric the machine's CPUs can forward at full rate
            topo.links = [replace(lk, rate_bps=parse_rate(rate)) for lk in topo.links]
            topo.default_rate_bps = parse_rate(rate)
    except ValueError as e:
        raise ClockfabricError(str(e)) from None
    hosts = list(topo.hosts)
    planes = common_planes(topo, hosts)
    info = machine()
    rows, baselines = [], {}
    status, code = "ok", 0
    started = time.monotonic()

    def note(line: str) -> None:
        err.print(f"[dim]{time.monotonic() - started:6.0f}s[/] {line}", highlight=False)

    try:
        with labs_removed(name):
            lab = build.up(topo, name)
            note(f"lab {name} up: {len(hosts)} hosts, planes {planes}")
            for k in sub_list:
                if baseline_s > 0:
                    note(f"tcp ring, {k} subflow(s): iperf3 for {baseline_s:g} s")
                    baselines[k] = tcp_ring(lab, hosts, k, planes, baseline_s)
                for alg in alg_list:
                    note(f"{alg}, {k} subflow(s): sizes {', '.join(map(format_size, size_list))}")
                    res = allreduce(lab, hosts, sizes=size_list, subflows=k, algorithm=alg, iters=iters,
                                    warmup=warmup, timeout_s=60)
                    base = baselines.get(k, {}).get("busbw_gbps")
                    for r in res.rows:
                        rows.append({"algorithm": alg, "subflows": k, "size_bytes": r.size_bytes, "time_us": r.time_us,
                                     "algbw_gbps": r.algbw_gbps, "busbw_gbps": r.busbw_gbps, "wrong": r.wrong,
                                     "expected_busbw_gbps": res.expected_busbw_gbps,
                                     "ring_expected_busbw_gbps": expected_busbw_gbps(topo, hosts, k, planes),
                                     "busbw_over_expected": res.ratio(r),
                                     "tcp_ring_busbw_gbps": base,
                                     "busbw_over_tcp_ring": r.busbw_gbps / base if base else None})
    except KeyboardInterrupt:
        status, code = "interrupted", 130
    except ClockfabricError as e:
        status, code = f"failed: {e}", 1
        err.print(f"[red]benchmark failed:[/] {e}")
    info = harness.finish(info)

    rates = sorted({lk.rate_bps for lk in topo.links})
    table = Table(title=f"all-reduce on {topo.name} ({len(hosts)} hosts, planes {planes}, "
                        f"{', '.join(map(format_rate, rates))} links); "
                        f"{info['cores']} CPUs, load {' '.join(info['loadavg_start'])} -> "
                        f"{' '.join(info['loadavg_end'])}")
    for col in ("algorithm", "subflows", "size", "time (ms)", "busbw (GB/s)", "expected", "busbw/expected",
                "tcp ring", "busbw/tcp ring", "#wrong"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["algorithm"], str(r["subflows"]), format_size(r["size_bytes"]), f"{r['time_us'] / 1e3:.1f}",
                      f"{r['busbw_gbps']:.4f}", f"{r['expected_busbw_gbps']:.4f}", f"{r['busbw_over_expected']:.2f}",
                      f"{r['tcp_ring_busbw_gbps']:.4f}" if r["tcp_ring_busbw_gbps"] else "-",
                      f"{r['busbw_over_tcp_ring']:.2f}" if r["busbw_over_tcp_ring"] else "-", str(r["wrong"]))
    out.print(table)
    if any(r["wrong"] for r in rows):
        status, code = "wrong results", 1
        err.print("[red]some results were wrong (#wrong > 0)")
    data = {"benchmark": "allreduce-vs-tcp", "status": status, "machine": info,
            "params": {"topology": str(topology), "link_rates_bps": rates, "hosts": hosts, "planes": planes,
                       "sizes": size_list,
                       "subflows": sub_list, "algorithms": alg_list, "iters": iters, "warmup": warmup,
                       "baseline_s": baseline_s, "timing": "per iteration the slowest rank, mean over iterations"},
            "tcp_ring": baselines, "rows": rows}
    record("allreduce-vs-tcp", targets(rows), info, data, path=json_path)
    err.print(f"results written to {json_path}")
    raise typer.Exit(code)
