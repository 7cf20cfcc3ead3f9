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
from clockfabric.qos.backlog import EgressBacklog, QueueSampler
from clockfabric.qos.policy import Ask
from clockfabric.telemetry.nic import NicRates
from clockfabric.topology import host_of_address
from clockfabric.workload import exchange, samples, stages
from clockfabric.workload.monitor import BUSY_BPS, WorkloadMonitor, WorkloadView
from clockfabric.workload.owd_monitor import InbandOwd
from clockfabric.workload.paths import FlowPaths, KernelDevice, PathTracer
from clockfabric.workload.procfs import ProcFs
from clockfabric.workload.sockets import KernelSockets

log = logging.getLogger(__name__)


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
        self.cpu = stages.StageCpu()  # this service's CPU time by stage: what it costs the host
        # sampled packets are read once an update, from the capture's ring (its times are the
        # kernel's, not the read's): the agent's loop never wakes for them
        self.capture: NicCapture | None = None
        self.dropped = 0  # sampled packets the ring had no room for
        try:
            self.capture = NicCapture(ctx.rails)
        except OSError as e:  # no raw sockets here (no CAP_NET_RAW): flows keep RTT/2 only
            log.warning("cannot sample packets on %s (%s): one-way delays fall back to RTT/2", ctx.rails, e)
        self.inband = InbandOwd(ctx.cfg.host, host_of_address(ctx.cfg.topology), self.ctx.to_time,
                                window_ns=round(ctx.cfg.window_s * 1e9))
        self.owd: samples.FlowOwd = {}
        self.device: KernelDevice | None = None
        try:
            self.device = KernelDevice()
        except OSError as e:  # no route netlink: traces leave by the routes' choice, without the ports
            log.warning("cannot look up flows' routes (%s)", e)
        self.paths = PathTracer(FlowPaths(ctx.cfg.topology, ctx.cfg.host, device_of=self.device))
        rates = ctx.cfg.topology.port_rates(ctx.cfg.host)
        self.egress: QueueSampler | None = None  # the NICs' own queues, which the capture sees past
        self.egress_s: dict[str, float] = {}
        self.egress_by_dscp: dict[str, dict[int, float]] = {}  # where a NIC sorts packets into classes
        try:
            if any(rates.get(nic) for nic in ctx.rails):
                self.egress = QueueSampler(EgressBacklog({nic: rates.get(nic, 0) for nic in ctx.rails}))
                ctx.on_link_change.append(self.egress.backlog.forget)  # a NIC back as another device
        except OSError as e:
            log.warning("cannot read the NICs' queues (%s): a queue on this host's own links goes unseen", e)
        ctx.on_link_change.append(self.paths.forget)  # a changed fabric moves the hash
        self.nics = NicRates(list(ctx.rails))
        self.nic_bps: dict[str, tuple[float, float]] = {}
        self.nic_read_ns = 0  # when they were read (wall clock): a rate is the span up to its read
        ctx.job_sockets = lambda: [(f.jobid, f.rates.reading.cookie) for f in self.view.flows]  # for QoS
        ctx.job_flows = lambda: (self.view.flows, self.owd)  # for QoS's pacing
        ctx.job_sockets_opened = self.monitor.opened  # for QoS's pacing, between updates
        ctx.job_qos = lambda: {jobid: Ask(j.qos, j.groups) for jobid, j in self.view.jobs.items() if j.qos or j.groups}
        self.paths.start()

    def _take_samples(self) -> None:
        if self.capture is None:
            return
        with self.cpu.stage(stages.CAPTURE):
            packets = self.capture.drain()
            self.dropped += self.capture.dropped()
        with self.cpu.stage(stages.MATCH):
            self.inband.captured(packets, time.monotonic_ns())

    def poll(self, now_s: float) -> float:
        if self.egress is None:
            return math.inf
        with self.cpu.stage(stages.QUEUES):
            try:
                return self.egress.poll(now_s)
            except OSError as e:
                log.warning("reading the NICs' queues: %s", e)
                return now_s + 1.0

    def on_message(self, msg: dict, reply_to: tuple[str, int]) -> None:
        with self.cpu.stage(stages.RECEIVE):
            records = exchange.decode(msg)
        with self.cpu.stage(stages.MATCH):
            self.inband.received(str(msg["from"]), records, time.monotonic_ns())

    def tick(self, now_ns: int) -> None:
        self._take_samples()
        with self.cpu.stage(stages.FLOWS):
            self.nic_bps, self.nic_read_ns = self.nics.read(time.monotonic()), time.time_ns()
            known = self.nics.devices and len(self.nic_bps) == len(self.nics.devices)
            fabric_tx_bps = sum(tx for tx, _ in self.nic_bps.values()) if known else None
            try:
                self.view = self.monitor.update(fabric_tx_bps)
            except OSError as e:  # /proc or netlink failing: keep the last view, say so once an update
                log.warning("workload update: %s", e)
            self.inband.flows_changed(self.view)
            if self.capture is not None:  # the kernel drops every other flow's packets
                self.capture.only(self.inband.port_bits())
        with self.cpu.stage(stages.SEND):
            for peer, messages in self.inband.messages().items():
                for msg in messages:
                    self.ctx.send(peer, msg)
        with self.cpu.stage(stages.WINDOW):
            self.inband.tick(self.view, time.monotonic_ns())
            self.owd = self.inband.owd
        if self.egress is not None:
            with self.cpu.stage(stages.QUEUES):
                try:
                    idle = fabric_tx_bps is not None and fabric_tx_bps < BUSY_BPS
                    self.egress_s, self.egress_by_dscp = self.egress.take(idle)
                except OSError as e:
                    log.warning("reading the NICs' queues: %s", e)
        with self.cpu.stage(stages.PATHS):
            self.paths.want([f.rates.key for f in self.view.flows] + [r.key for r in self.view.busy_others])

    def report(self) -> dict:
        capture = self.capture
        by_stage = {**self.cpu.as_dict(), stages.PATHS: self.cpu.seconds[stages.PATHS] + self.paths.cpu_s}
        inband = {"capturing": capture is not None, "sampled_packets": capture.kept if capture else 0,
                  "dropped_packets": self.dropped,
                  "cpu_seconds": by_stage.get(stages.CAPTURE, 0.0)}
        return {"workload": {**samples.state(self.view, self.owd), "cpu_seconds": sum(by_stage.values()),
                             "cpu_seconds_by_stage": by_stage, "inband": inband}}

    def snapshot(self) -> Snapshot:
        view, owd = self.view, self.owd  # each replaced whole by a tick: one consistent view
        return Snapshot(samples=samples.push_samples(view, owd, self.paths.paths.via)
                        + samples.egress_samples(self.egress_s, self.egress_by_dscp)
                        + samples.nic_samples(self.nic_bps, self.nic_read_ns),
                        info={"workload": samples.summary(view)})

    def stop(self) -> None:
        self.paths.stop()
        self.paths.join(timeout=2.0)
        if self.egress is not None:
            self.egress.backlog.close()
        if self.device:
            self.device.close()
        if self.sockets:
            self.sockets.close()
        if self.capture:
            self.capture.close()
