"""Workload monitoring: the jobs on this host and their TCP flows, read each update; pushed to
the controller as samples, published (and so on /metrics) per job and flow."""

from __future__ import annotations

import logging
import time

from clockfabric.agent.context import AgentContext
from clockfabric.agent.service import Service, Snapshot, service
from clockfabric.workload import samples
from clockfabric.workload.monitor import WorkloadMonitor, WorkloadView
from clockfabric.workload.procfs import ProcFs
from clockfabric.workload.sockets import KernelSockets

log = logging.getLogger(__name__)


@service("workload", help="Jobs on this host (Slurm, torchrun, Kubernetes, `job run`) and their TCP flows")
class Workload(Service):
    def __init__(self, ctx: AgentContext):
        self.sockets: KernelSockets | None = None
        try:  # made here, on the main thread, in the host's namespace: ticks read it there
            self.sockets = KernelSockets()
        except Exception as e:  # noqa: BLE001 - no sock_diag here: jobs without their flows
            log.warning("cannot read TCP sockets (%s): jobs are reported without flows", e)
        self.monitor = WorkloadMonitor(ProcFs(), self.sockets)
        self.view = WorkloadView()
        self.cpu_s = 0.0  # this service's CPU time over all updates: what it costs the host

    def tick(self, now_ns: int) -> None:
        t0 = time.thread_time()
        try:
            self.view = self.monitor.update()
        except OSError as e:  # /proc or netlink failing: keep the last view, say so once an update
            log.warning("workload update: %s", e)
        self.cpu_s += time.thread_time() - t0

    def report(self) -> dict:
        return {"workload": {**samples.state(self.view), "cpu_seconds": self.cpu_s}}

    def snapshot(self) -> Snapshot:
        view = self.view  # replaced whole by each tick: one consistent view
        return Snapshot(samples=samples.push_samples(view), info={"workload": samples.summary(view)})

    def stop(self) -> None:
        if self.sockets:
            self.sockets.close()
