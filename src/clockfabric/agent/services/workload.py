"""Workload monitoring: the jobs on this host and their TCP flows, read each update; pushed to
the controller as samples, published (and so on /metrics) per job and flow. With them, each
flow's in-band one-way delays: a sample of its packets timestamped by the kernel on this host's
NICs, their records exchanged with the agent at the flow's far end (control message "inband")
and matched here, on the synced clocks. And where each flow goes: the switch its 5-tuple is traced
through (workload.paths, on a thread of its own) and the DSCP its socket marks."""

from __future__ import annotations

import logging
import math
import time

from clockfabric.agent.capture import NicCapture
from clockfabric.agent.context import AgentContext
from clockfabric.agent.service import Service, Snapshot, service
from clockfabric.workload import exchange, samples
from clockfabric.workload.monitor import WorkloadMonitor, WorkloadView
from clockfabric.workload.owd_monitor import InbandOwd
from clockfabric.workload.paths import FlowPaths, KernelDevice, PathTracer
from clockfabric.workload.procfs import ProcFs
from clockfabric.workload.sockets import KernelSockets

log = logging.getLogger(__name__)
CAPTURE_POLL_S = 0.1  # how often sampled packets are read: their times are the kernel's, not the read's


@service("workload", help="Jobs on this host (Slurm, torchrun, Kubernetes, `job run`), their TCP flows "
                          "and the flows' in-band one-way delays")
class Workload(Service):
    handles = frozenset({exchange.MESSAGE})

    def __init__(self, ctx: AgentContext):
        self.ctx = ctx
        self.sockets: KernelSockets | None = None
        try:  # made here, on the main thread, in the host's namespace: ticks read it there
            self.sockets = KernelSockets()
        except Exception as e:  # noqa: BLE001 - no sock_diag here: jobs without their flows
            log.warning("cannot read TCP sockets (%s): jobs are reported without flows", e)
        self.monitor = WorkloadMonitor(ProcFs(), self.sockets)
        self.view = WorkloadView()
        self.cpu_s = 0.0  # this service's CPU time over all updates: what it costs the host
        self.capture: NicCapture | None = None
        try:
            self.capture = NicCapture(ctx.rails)
        except OSError as e:  # no raw sockets here (no CAP_NET_RAW): flows keep RTT/2 only
            log.warning("cannot sample packets on %s (%s): one-way delays fall back to RTT/2", ctx.rails, e)
        self.inband = InbandOwd(ctx.cfg.host, {a: h for h, a in ctx.addresses.items()}, self.ctx.to_time,
                                window_ns=round(ctx.cfg.window_s * 1e9))
        self.owd: samples.FlowOwd = {}
        self.device: KernelDevice | None = None
        try:
            self.device = KernelDevice()
        except OSError as e:  # no route netlink: traces leave by the routes' choice, without the ports
            log.warning("cannot look up flows' routes (%s)", e)
        self.paths = PathTracer(FlowPaths(ctx.cfg.topology, ctx.cfg.host, device_of=self.device))
        ctx.on_link_change.append(self.paths.forget)  # a changed fabric moves the hash
        self.paths.start()

    def poll(self, now_s: float) -> float:
        """Sampled packets read often only while a job flow may have some: with none, every
        sample is dropped unread, and the update's read empties the buffer (a wake-up of the
        agent's loop costs more than the read)."""
        if self.capture is None or not self.inband.peers:
            return math.inf
        self._take_samples()
        return now_s + CAPTURE_POLL_S

    def _take_samples(self) -> None:
        if self.capture is not None:
            self.inband.captured(self.capture.drain(), time.monotonic_ns())

    def on_message(self, msg: dict, reply_to: tuple[str, int]) -> None:
        self.inband.received(str(msg["from"]), exchange.decode(msg), time.monotonic_ns())

    def tick(self, now_ns: int) -> None:
        t0 = time.thread_time()
        self._take_samples()
        try:
            self.view = self.monitor.update()
        except OSError as e:  # /proc or netlink failing: keep the last view, say so once an update
            log.warning("workload update: %s", e)
        self.inband.flows_changed(self.view)
        for peer, messages in self.inband.messages().items():
            for msg in messages:
                self.ctx.send(peer, msg)
        self.inband.tick(self.view, time.monotonic_ns())
        self.paths.want([f.rates.key for f in self.view.flows] + [r.key for r in self.view.busy_others])
        self.owd = self.inband.owd
        self.cpu_s += time.thread_time() - t0

    def report(self) -> dict:
        capture = self.capture
        inband = {"capturing": capture is not None, "sampled_packets": capture.kept if capture else 0,
                  "cpu_seconds": capture.cpu_s if capture else 0.0}
        return {"workload": {**samples.state(self.view, self.owd), "cpu_seconds": self.cpu_s, "inband": inband}}

    def snapshot(self) -> Snapshot:
        view, owd = self.view, self.owd  # each replaced whole by a tick: one consistent view
        return Snapshot(samples=samples.push_samples(view, owd, self.paths.paths.via),
                        info={"workload": samples.summary(view)})

    def stop(self) -> None:
        self.paths.stop()
        self.paths.join(timeout=2.0)
        if self.device:
            self.device.close()
        if self.sockets:
            self.sockets.close()
        if self.capture:
            self.capture.close()
