"""A drawn fault, injected on a running case's lab: saturating flows of another job or of no
job, a link's rate cut or flapping, a host's senders stopped, a rogue rank marking the wrong
class or leaving on the wrong plane. Each returns `bench workload`'s Injection: what a right
verdict names, when the fault began to act, and how to undo it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from clockfabric.bench.rootcause.draw import CULPRIT_JOB, STYLES, Case, FlowSpec
from clockfabric.bench.workload.command import Injection
from clockfabric.bench.workload.jobs import COLLECTIVE
from clockfabric.lab.state import Lab

SATURATING = {"chunk": 65536, "pause_s": 0.0}


def start_flow(lab: Lab, logs: Path, jobid: str | None, f: FlowSpec, port: int, style: dict,
               dscp: int = COLLECTIVE) -> list[subprocess.Popen]:
    """A drawn flow, pinned on its spine where it has one: between the hosts' stable addresses on
    one plane, else between their NICs on its plane (a host picks the plane of a stable address
    by the pair alone, so no source port moves a pair's flows to another)."""
    from clockfabric.lab.flows import flow
    from clockfabric.probe.paths import spread

    plane = f.plane if len(lab.topology.planes) > 1 or not f.spine else None
    return flow(lab, logs, jobid, f.src, f.dst, port, spine=f.spine or None, spread=spread, dscp=dscp, plane=plane,
                chunk=style["chunk"], pause_s=style["pause_s"])


def inject(lab: Lab, logs: Path, case: Case, senders_of_a: dict[str, list[subprocess.Popen]],
           port: int) -> Injection:
    """Inject `case`'s fault now. senders_of_a: job A's flows' processes by sending host."""
    from clockfabric.lab import impair
    from clockfabric.lab.flows import sender_log, senders, sending_since
    from clockfabric.lab.process import stop

    fault = case.fault
    if fault.kind in ("congestion_other_job", "congestion_non_job", "misconfigured_class",
                      "misconfigured_interface"):
        jobid = {"congestion_other_job": CULPRIT_JOB, "congestion_non_job": None}.get(fault.kind, "A")
        style = SATURATING if fault.kind.startswith("congestion") else STYLES["paced"]
        dscp = 0 if fault.kind == "misconfigured_class" else COLLECTIVE
        procs: list[subprocess.Popen] = []
        try:
            for i, c in enumerate(fault.culprits):
                procs += start_flow(lab, logs, jobid, c, port + i, style, dscp=dscp)
            onset = min(sending_since(sender_log(logs, jobid, c.src, c.dst, port + i))
                        for i, c in enumerate(fault.culprits))
        except BaseException:
            stop(procs, grace_s=2.0)
            raise
        links = {fault.link} if fault.link else set()
        culprit = {"congestion_other_job": CULPRIT_JOB, "congestion_non_job": "(no job)"}.get(fault.kind)
        return Injection(fault.kind, links, culprit, lambda: stop(procs, grace_s=2.0), onset)
    if fault.kind == "straggler_host":
        pids = senders(senders_of_a[fault.host or ""])
        onset = time.time_ns()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)

        def resume() -> None:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)

        return Injection(fault.kind, culprit=fault.host, undo=resume, onset_ns=onset)
    if fault.kind in ("degraded_link", "flapping_link"):
        a, _, b = (fault.direction or "").partition(">")
        link = impair.find_link(lab, a, b)
        onset = time.time_ns()
        if fault.kind == "degraded_link":
            impair.set_rate(lab, link, fault.intensity["rate_bps"])
            return Injection(fault.kind, {link.name}, undo=lambda: impair.set_rate(lab, link, link.rate_bps),
                             onset_ns=onset)
        impair.flap(lab, link, down_s=fault.intensity["down_s"], up_s=fault.intensity["up_s"],
                    count=fault.intensity["count"])
        return Injection(fault.kind, {link.name}, onset_ns=onset)
    return Injection(fault.kind)
