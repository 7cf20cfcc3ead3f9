"""What the workload service costs: a host's CPU, and a training job's step time.

CPU per update at 4 jobs x 16 flows, real processes with real sockets on loopback, read through
/proc and sock_diag as the agent reads them; against, in the same run, the bare sock_diag read
of the same sockets (traffic's FlowReader, the reader the service is built on): the difference
is what finding each socket's process and job costs. Target: at one update a second, at most 1%
of a core.

The job's step time: paired runs of the lab's DDP job with and without the agents' workload
service (bench.workload.cost_ddp). Target: at most 1% longer steps, median of the pairs. In the
same pairs, what the service costs each host with the job's traffic live (its flows read, its
packets sampled, matched and exchanged, its paths traced): each agent's CPU with the service
less without, the median of the pairs; target: at most 1% of a core. The service's own count
of its CPU by stage (its state's cpu_seconds_by_stage) says where it goes."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, machine, record, targets_table
from clockfabric.console import out, print_json, require_root
from clockfabric.lab import process

BUDGET = 0.01  # of a core, at one update a second
STEP_BAR = 1.01  # the job's step time with workload monitoring over without
# a job's process: `connections` connections to itself, a little traffic on each, then it waits
JOB = """
import socket, sys, time
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
pairs = []
for _ in range(int(sys.argv[1])):
    c = socket.create_connection(srv.getsockname()); a, _ = srv.accept(); pairs.append((c, a))
for c, a in pairs:
    c.sendall(b"x" * 65536); a.recv(65536)
print("ready", flush=True)
time.sleep(600)
"""


@contextmanager
def jobs_running(jobs: int, connections: int, prefix: str = "bench") -> Iterator[list[str]]:
    """`jobs` processes, each its own job (`CLOCKFABRIC_JOB=<prefix><i>`) with 2 x `connections`
    TCP flows on loopback; the job ids, and every process stopped on the way out."""
    names = [f"{prefix}{i}" for i in range(jobs)]
    procs = [process.spawn([sys.executable, "-c", JOB, str(connections)], stdout=subprocess.PIPE, text=True,
                           env={**os.environ, "CLOCKFABRIC_JOB": name, "RANK": "0"}) for name in names]
    try:
        for p in procs:
            if p.stdout is None or p.stdout.readline().strip() != "ready":
                raise RuntimeError("a job process did not open its connections")
        yield names
    finally:
        process.stop(procs, grace_s=1.0)


def cpu_per_call(fn: Callable[[], object], calls: int) -> list[float]:
    """This thread's CPU seconds for each of `calls` calls of fn."""
    times = []
    for _ in range(calls):
        start = time.thread_time()
        fn()
        times.append(time.thread_time() - start)
    return times


@BENCHMARKS.register("workload-cost")
def main(jobs: int = typer.Option(4, min=1, max=64, help="Jobs, one process each."),
         flows: int = typer.Option(16, min=2, max=512, help="TCP flows a job (an even number: both ends)."),
         updates: int = typer.Option(30, min=3, help="Updates measured, after one to warm up."),
         pairs: int = typer.Option(6, min=0, help="Paired DDP runs, with and without the workload service "
                                                  "(0: none; runs need root, for the lab)."),
         steps: int = typer.Option(40, min=5, help="Training steps per DDP run."),
         out_file: Path = typer.Option(RESULTS / "workload-cost.json", "--out", help="Where the record goes."),
         as_json: bool = typer.Option(False, "--json", help="Print the record's report as JSON.")) -> None:
    from clockfabric.bench.workload import cost_ddp as workload_cost_ddp
    from clockfabric.traffic.steer_kernel import FlowReader
    from clockfabric.workload.monitor import WorkloadMonitor
    from clockfabric.workload.procfs import ProcFs
    from clockfabric.workload.sockets import KernelSockets

    if pairs:
        require_root()
    facts = machine()
    with jobs_running(jobs, flows // 2) as names:
        sockets, reader = KernelSockets(), FlowReader()
        try:
            monitor = WorkloadMonitor(ProcFs(), sockets)
            view = monitor.update()  # the first update reads every process's environment once
            ours = cpu_per_call(monitor.update, updates)
            bare = cpu_per_call(reader.read, updates)
        finally:
            sockets.close()
            reader.close()
    found = sum(1 for f in view.flows if f.jobid in names)
    median_ours, median_bare = statistics.median(ours), statistics.median(bare)
    report = {"jobs": jobs, "flows_per_job": flows, "updates": updates, "flows_found": found,
              "host_tcp_sockets": len(view.flows) + view.other_flows,
              "update_cpu_s": median_ours, "sock_diag_cpu_s": median_bare,
              "update_cpu_s_all": ours, "sock_diag_cpu_s_all": bare}
    target = Target(f"CPU at one update a second, {jobs} jobs x {flows} flows", round(median_ours, 5), BUDGET,
                    "core", better="lower", baseline=round(median_bare, 5),
                    note=f"{found} of {jobs * flows} flows attributed; baseline: the bare sock_diag read")
    targets = [target]
    if pairs:
        ddp = workload_cost_ddp.paired_runs(pairs, steps)
        report["ddp"] = {**ddp.as_dict(), "steps": steps, "seed": workload_cost_ddp.SEED}
        targets.append(Target("DDP step time, agents with / without the workload service",
                              round(statistics.median(ddp.ratios), 4), STEP_BAR, "x", better="lower", baseline=1.0,
                              interval=ddp.interval(),
                              note=f"median of {pairs} paired runs of examples/ddp_train.py ({steps} steps, seed "
                                   f"{workload_cost_ddp.SEED}), order alternating; without: "
                                   f"{statistics.median(ddp.without) * 1e3:.0f} ms/step; each agent used "
                                   f"{statistics.median(ddp.agent_cpu['A']):.1%} of a core with the service, "
                                   f"{statistics.median(ddp.agent_cpu['B']):.1%} without"))
        stage_note = ", ".join(f"{k} {v:.2%}" for k, v in ddp.median_stages().items())
        targets.append(Target("Agent CPU with the workload service less without, live DDP traffic",
                              round(statistics.median(ddp.service_cpu), 5), BUDGET, "core", better="lower",
                              interval=[round(v, 5) for v in ddp.interval(ddp.service_cpu)],
                              note=f"median of {pairs} pairs, each agent's CPU while the job ran: "
                                   f"{statistics.median(ddp.agent_cpu['A']):.2%} of a core with the service, "
                                   f"{statistics.median(ddp.agent_cpu['B']):.2%} without; the service's own "
                                   f"count by stage: {stage_note}"))
    record("workload-cost", targets, facts, report, path=out_file)
    if as_json:
        print_json(report)
        return
    out.print(targets_table("workload monitoring's cost", targets))
    out.print(f"{found} of {jobs * flows} job flows attributed; {report['host_tcp_sockets']} TCP sockets on the "
              f"host; update {median_ours * 1e3:.2f} ms CPU, bare sock_diag read {median_bare * 1e3:.2f} ms")
