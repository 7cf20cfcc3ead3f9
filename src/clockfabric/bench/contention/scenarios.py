"""The contention scenarios run: the elephants and what the jobs leave them, one run of a
scenario's jobs under one scheduler (run_one), and every scheduler and seed of a scenario
(run_scenario)."""

from __future__ import annotations

import queue
import random
import subprocess
import threading
import time
from collections.abc import Callable

from clockfabric.bench.contention.model import (
    ALONE_S,
    ELEPHANT_CONGESTION,
    ELEPHANT_SECONDS,
    ELEPHANTS,
    SETTLE_S,
    Plan,
    Run,
    jobs_of,
    plane0,
)
from clockfabric.bench.harness import cpu_ticks, steal_share
from clockfabric.collective.run import run_collective
from clockfabric.errors import ClockfabricError
from clockfabric.lab import impair, netns
from clockfabric.lab.flows import IPERF_PORT, pinned_iperf
from clockfabric.lab.process import stop
from clockfabric.lab.state import Lab
from clockfabric.probe.paths import spread
from clockfabric.traffic.steer import FlowReader


def _elephants(lab: Lab) -> list[subprocess.Popen]:
    procs: list[subprocess.Popen] = []
    try:
        for src, dst in ELEPHANTS:
            procs += pinned_iperf(lab, src, dst, plane0(lab.topology, "spine0"), spread, seconds=ELEPHANT_SECONDS,
                                  congestion=ELEPHANT_CONGESTION)
    except BaseException:
        stop(procs)
        raise
    time.sleep(1.0)  # the elephants reach their rate
    if ended := [p for p in procs if p.poll() is not None]:
        stop(procs)
        raise ClockfabricError(f"an iperf3 elephant flow exited at once (exit code {ended[0].returncode}); does this "
                               f"kernel offer TCP {ELEPHANT_CONGESTION}? "
                               "(sysctl net.ipv4.tcp_available_congestion_control)")
    return procs


class Outsiders:
    """The elephants' bytes acknowledged so far, read from their senders' sockets (sock_diag,
    bound in each sender's namespace): the rate a run left the traffic outside the jobs."""

    def __init__(self, lab: Lab, port: int = IPERF_PORT):
        self.port, self.readers = port, []
        try:
            for src in dict.fromkeys(src for src, _ in ELEPHANTS):
                with netns.entered(lab.ns(src)):
                    self.readers.append(FlowReader())
        except BaseException:
            self.close()
            raise

    def mark(self) -> tuple[float, int]:
        """(now, bytes acknowledged to the elephants' port so far)."""
        acked = sum(s.bytes_acked for r in self.readers for s in r.read() if s.key.rport == self.port)
        return time.monotonic(), acked

    def close(self) -> None:
        for r in self.readers:
            r.close()


def mbps(start: tuple[float, int], end: tuple[float, int]) -> float | None:
    """The rate between two Outsiders.mark()s, Mbit/s."""
    return round((end[1] - start[1]) * 8 / (end[0] - start[0]) / 1e6, 3) if end[0] > start[0] else None


def still_running(procs: list[subprocess.Popen], during: str) -> None:
    """A clear error where background traffic ended: the run it was meant to load would
    otherwise be counted as if loaded."""
    if ended := [p for p in procs if p.poll() is not None]:
        raise ClockfabricError(f"an iperf3 elephant flow ended (exit code {ended[0].returncode}) before {during} "
                               "was done: that run was not loaded as the scenario says, so the bench stops")


def run_one(lab: Lab, scenario: str, scheduler: str, seed: int, plan: Plan, *,
            outsiders: Outsiders | None = None) -> Run:
    """The scenario's jobs, all at once, under one scheduler, as the plan says (its subflows
    given); with `outsiders`, their rate alone just before the run and over its timed iterations."""
    subflows, warmup = plan.subflows or 1, plan.warmup
    jobs = jobs_of(scenario)
    results: list = [None] * len(jobs)
    # the jobs begin their warmup together, once all have connected, and keep the fabric loaded
    # until all have their timings: otherwise a job's first or last iterations could run on a
    # fabric to itself
    gate = threading.Barrier(len(jobs)) if len(jobs) > 1 else None

    # the first job's timed iterations start and end (rank 0's warmup, then its last iteration,
    # done): the outsiders are read then, on this thread, whose sockets they are
    marks: queue.SimpleQueue = queue.SimpleQueue()

    def timing(stage: str, done: int, total: int) -> None:
        if stage != "connecting" and done in (warmup, total):
            marks.put("end" if done == total else "start")

    def job(i: int) -> None:
        collective, hosts = jobs[i]
        try:
            res = run_collective(lab, hosts, plan.options(scheduler, collective), sizes=[plan.size], gate=gate,
                                 progress=timing if outsiders and i == 0 else None)
            row = res.rows[0]
            carried = [(r["subflow"] >= subflows, r["bytes"]) for rows in res.subflow_stats.values() for r in rows]
            results[i] = {"collective": collective, "hosts": hosts, "time_us": row.time_us,
                          "busbw_gbps": row.busbw_gbps, "wrong": row.wrong, "bytes": sum(b for _, b in carried),
                          "standby_bytes": sum(b for spare, b in carried if spare)}
        except ClockfabricError as e:
            results[i] = e
            if gate:
                gate.abort()  # the other job must not wait for this one

    threads = [threading.Thread(target=job, args=(i,)) for i in range(len(jobs))]
    alone = outside = None
    if outsiders:
        time.sleep(SETTLE_S)
        first = outsiders.mark()
        time.sleep(ALONE_S)
        alone = mbps(first, outsiders.mark())
    before = cpu_ticks()
    for t in threads:
        t.start()
    timed: dict[str, tuple[float, int]] = {}
    while any(t.is_alive() for t in threads):
        try:
            mark = marks.get(timeout=0.1)
        except queue.Empty:
            continue
        if outsiders is not None:  # marks come only with outsiders to read
            timed[mark] = outsiders.mark()
    if "start" in timed and "end" in timed:
        outside = mbps(timed["start"], timed["end"])
    if errors := [r for r in results if isinstance(r, Exception)]:
        raise errors[0]
    return Run(scenario, scheduler, seed, results, steal_share(before, cpu_ticks()), outside, alone)


def run_scenario(lab: Lab, scenario: str, plan: Plan, progress: Callable[[str], None]) -> list[Run]:
    """Every seed of the plan under each of its schedulers, the scenario's fault or traffic set up first."""
    schedulers = list(plan.schedulers)
    procs: list[subprocess.Popen] = []
    outsiders = None
    link = impair.find_link(lab, plane0(lab.topology, "leaf0"), plane0(lab.topology, "spine0"))
    try:
        if scenario == "degraded":
            impair.set_rate(lab, link, link.rate_bps // 4)
        elif scenario == "elephants":
            procs = _elephants(lab)
            outsiders = Outsiders(lab)
        runs = []
        order = [(seed, s) for seed in range(plan.seeds)
                 for s in random.Random(seed).sample(schedulers, len(schedulers))]
        for seed, scheduler in order:  # schedulers interleaved, in a shuffled order per seed: drift hits all
            run = run_one(lab, scenario, scheduler, seed, plan, outsiders=outsiders)
            still_running(procs, f"{scenario} under {scheduler}, seed {seed}")
            stolen = "" if run.cpu_steal is None else f"  (CPU steal {run.cpu_steal:.0%})"
            left = ("" if run.outside_mbps is None or run.outside_alone_mbps is None else
                    f"  (elephants {run.outside_mbps:.1f} of {run.outside_alone_mbps:.1f} Mbit/s alone)")
            progress(f"{scenario:14} {scheduler:18} seed {seed}: {run.time_us / 1e6:6.2f} s{stolen}{left}")
            runs.append(run)
        return runs
    finally:
        if outsiders:
            outsiders.close()
        stop(procs)
        if scenario == "degraded":
            impair.set_rate(lab, link, link.rate_bps)
