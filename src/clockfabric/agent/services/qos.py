"""QoS: each job's class enforced on this host (clockfabric.qos). The policies come with the
controller's answer to every push, or from `--qos-file`; a job without one there may ask for a
class itself (CLOCKFABRIC_QOS, `job run --qos`). The jobs' sockets come from the workload
service. Each update the marks and shaping follow them, all or nothing (qos.enforce); a refusal
is an event and part of the pushed state. At start, whatever a killed agent left (found by its
tags) is removed; at stop, everything of ours is. On every fabric it paces the lower classes where
a higher class queues (agent.qos_pace): on one FIFO that is all there is; where the switches have
classes it holds a lower class under the share they guarantee it when the higher class needs the
link. It tells the other hosts its queue readings as they change, sealed (qos.shared)."""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import replace
from pathlib import Path

from pyroute2.netlink.exceptions import NetlinkError

from clockfabric.agent.context import AgentContext
from clockfabric.agent.qos_pace import PERIOD_S, HostPacer, release_left
from clockfabric.agent.service import Service, Snapshot, service
from clockfabric.errors import ClockfabricError
from clockfabric.qos import policy
from clockfabric.qos.enforce import Enforcer, remove_all
from clockfabric.qos.shared import KIND, Audience, SharedQueues, encode
from clockfabric.topology import interfaces

log = logging.getLogger(__name__)


def effective(set_: list[policy.Policy], asks: dict[str, policy.Ask]) -> tuple[list[policy.Policy], list[str]]:
    """The policies set (controller, file) for jobs by name; for each running job without one, the
    first set for a group it is in (its Slurm QOS, then its partition), else the class it asks for
    itself (CLOCKFABRIC_QOS); with a line for each ask that is not a valid one."""
    by_name = {p.jobid: p for p in set_}
    out, problems = [p for p in set_ if not policy.names_group(p.jobid)], []
    for jobid, ask in sorted(asks.items()):
        if jobid in by_name:
            continue
        if group := next((by_name[g] for g in ask.groups if g in by_name), None):
            out.append(replace(group, jobid=jobid))
        elif ask.own:
            try:
                out.append(policy.parse_asked(jobid, ask.own))
            except ClockfabricError as e:
                problems.append(f"job {jobid}: {e}")
    return out, problems


def read_policies(raw: object) -> list[policy.Policy]:
    """A list of policies (qos.policy.Policy.as_dict); ClockfabricError naming the first bad one."""
    if not isinstance(raw, list):
        raise ClockfabricError("QoS policies are a JSON list of {\"jobid\", \"class\", \"weight\"}")
    return [policy.from_dict(p) for p in raw]


@service("qos", help="QoS: mark each job's packets with its class's DSCP, shape egress by class")
class Qos(Service):
    handles = frozenset({KIND})

    def __init__(self, ctx: AgentContext):
        self.ctx = ctx
        topo, host = ctx.cfg.topology, ctx.cfg.host
        rates = topo.port_rates(host)
        self.enforcer = Enforcer({nic: rates.get(nic, 0) for nic in ctx.rails})
        # the hosts pace the lower classes themselves (made at start)
        self.pace_file = Path(ctx.cfg.state_dir) / f"{host}.paced"
        self.pace_rates = {nic: rates.get(nic, 0) for nic in ctx.rails}
        self.pacer: HostPacer | None = None
        hosts = set(topo.hosts) - {host}
        self.peers = sorted(h for h in hosts if h in ctx.addresses)
        # a link into any host of the fleet, this one's too: a message also tells other hosts' links
        ends = {str(i.address.ip) for i in interfaces(topo).values() if i.port.node in topo.hosts}
        self.shared = SharedQueues({h: ctx.addresses[h] for h in self.peers}, 3 * ctx.cfg.window_s,
                                   frozenset(f">{a}" for a in ends | set(ctx.addresses.values())))
        self.audience = Audience(self.peers)
        self.told = 0  # messages sent to other hosts
        self.cpu_s = 0.0  # this service's own CPU: marking, pacing, telling (the bench's cost of QoS)
        self.join_cpu_s = 0.0  # of which looking for new sockets between updates
        self._pace_due = 0.0
        self.released_at_start = 0  # sockets a killed agent had paced
        self.policies: list[policy.Policy] = []
        self.file: Path | None = ctx.cfg.qos_file
        self._file_seen: float | None = None
        self.problem = ""  # why the last policies handed to us were not taken
        self.cleaned: list[str] = []  # NICs a killed agent had left marks or shaping on
        self.sockets: list[tuple[str, int]] = []
        self.in_force: list[policy.Policy] = []  # those set, and those jobs ask for themselves
        self.asked_problems: list[str] = []
        self._state: dict = {}  # made by each tick, read by the publisher and the pusher's thread
        if self.file is None:
            ctx.on_reply.append(self._from_controller)
        ctx.on_link_change.append(self._link_changed)

    def _link_changed(self) -> None:
        self.enforcer.stale = True  # a NIC back as a new device has none of our marks
        if self.pacer is not None:
            self.pacer.backlog.forget()

    def start(self) -> None:
        self.cleaned = remove_all(self.enforcer.devices)
        if self.cleaned:
            log.info("removed the QoS marks and shaping an earlier agent left on %s", ", ".join(self.cleaned))
        self.released_at_start = release_left(self.pace_file)
        if any(self.pace_rates.values()):
            self.pacer = HostPacer(self.pace_rates, self.pace_file, self.ctx.cfg.window_s)
        self._state = self.state()

    def _from_controller(self, body: dict) -> None:
        """Called from the pusher's thread: the list is replaced whole."""
        if "qos" in body:
            self._take(body["qos"])

    def _take(self, raw: object) -> None:
        try:
            self.policies = read_policies(raw)
            self.problem = ""
        except ClockfabricError as e:
            self.problem = str(e)

    def _read_file(self) -> None:
        assert self.file is not None
        try:
            mtime = self.file.stat().st_mtime
            if mtime != self._file_seen:
                self._file_seen = mtime
                self._take(json.loads(self.file.read_text()))
        except (OSError, ValueError) as e:
            self.problem = f"{self.file}: {e}"

    def tick(self, now_ns: int) -> None:
        started = time.thread_time()
        if self.file is not None:
            self._read_file()
        self.sockets = self.ctx.job_sockets() if self.ctx.job_sockets else []
        self.in_force, self.asked_problems = effective(self.policies, self.ctx.job_qos() if self.ctx.job_qos else {})
        self.enforcer.update(self.in_force, self.sockets)
        self.cpu_s += time.thread_time() - started
        self._state = self.state()

    def poll(self, now_s: float) -> float:
        """The pacing loop, every PERIOD_S, on the last update's flows and policies."""
        if self.pacer is None or self.ctx.job_flows is None:
            return math.inf
        if not self.in_force:  # no policy, no work: what was paced is let go once
            if self.pacer.loop.paced:
                self.pacer.release()
            return math.inf
        if now_s >= self._pace_due:
            started = time.thread_time()
            self._pace_due = now_s + PERIOD_S
            now_ns = self.ctx.clock.now_ns()
            if self.ctx.job_sockets_opened is not None and (lower := self._lower_jobs()):
                joining = time.thread_time()
                self.pacer.join(self.ctx.job_sockets_opened(lower))
                self.join_cpu_s += time.thread_time() - joining
            try:
                self.pacer.step(*self.ctx.job_flows(), self.in_force, self.shared.take(now_ns))
            except (OSError, NetlinkError) as e:  # the NICs' queues unreadable: the limits hold
                self.pacer.problem = f"cannot read the NICs' queues: {e}"
            self._tell(now_ns, now_s)
            self.cpu_s += time.thread_time() - started
        return self._pace_due

    def _lower_jobs(self) -> set[str]:
        """The jobs in force below the best class in force: their new sockets are looked for each
        period."""
        top = min(p.rank for p in self.in_force)
        return {p.jobid for p in self.in_force if p.rank > top}

    def _tell(self, now_ns: int, now_s: float) -> None:
        """This period's word to the other hosts that should hear it (qos.shared.Audience), one
        datagram each."""
        assert self.pacer is not None
        # only the last hops into the fleet's hosts: a flow to an address outside the fleet is no
        # other host's business, and a link a host cannot name would have it refuse the message
        fleet = self.shared.links
        readings = [r for r in self.pacer.tell(now_ns) if r.link in fleet]
        wants = self.pacer.wants & fleet
        readers = self.shared.readers({r.link for r in readings}, now_ns) if readings else []
        to = self.audience.pick(readers, wants, now_s)
        if not to:
            return
        msg = encode(self.ctx.cfg.host, now_ns, [r for r in self.pacer.saying if r.link in fleet], wants)
        for peer in to:
            self.ctx.send(peer, msg)
            self.told += 1

    def on_message(self, msg: dict, reply_to: tuple[str, int]) -> None:
        """Another host's queue readings (qos.shared): taken only while this host paces."""
        if self.pacer is None:
            self.shared.refused["not pacing here"] += 1
            return
        started = time.thread_time()
        self.shared.hear(msg, reply_to[0], self.ctx.clock.now_ns())
        self.cpu_s += time.thread_time() - started

    def state(self) -> dict:
        marked, applied = self.enforcer.marked(), self.enforcer.applied
        jobs: dict[str, dict] = {}
        by_job = {p.jobid: p for p in self.in_force}
        for jobid, cookie in self.sockets:
            if (p := by_job.get(jobid)) is not None and cookie in applied.marks:
                j = jobs.setdefault(jobid, {"class": p.qos_class, "weight": p.weight, "dscp": p.dscp,
                                            "sockets": 0, "marked_packets": 0})
                j["sockets"] += 1
                j["marked_packets"] += marked.get(cookie, 0)
        problem = "; ".join(filter(None, [self.problem, *self.asked_problems]))
        return {"policies": len(self.policies), "source": "file" if self.file else "controller",
                "cpu_seconds": round(self.cpu_s, 6),
                "refused": self.enforcer.refused, "problem": problem, "links": dict(self.enforcer.shaping),
                "cleaned_at_start": self.cleaned, "jobs": jobs, "pacing": self._pacing()}

    def _pacing(self) -> dict | None:
        """The lower classes' limit per link and the sockets held to it (None: no NIC's rate is known)."""
        if self.pacer is None:
            return None
        return {"links_bps": {k: round(v) for k, v in self.pacer.loop.limits.items()},
                "sockets": len(self.pacer.loop.paced), "sockets_ever": len(self.pacer.ever_paced),
                "joined_between_updates": self.pacer.joined_ever, "joining_cpu_seconds": round(self.join_cpu_s, 6),
                "limited_s": round(self.pacer.limited_s, 1), "problem": self.pacer.problem,
                "released_at_start": self.released_at_start,
                "shared": {"told": self.told, "heard": self.shared.accepted, "refused": dict(self.shared.refused),
                           "links_heard": sorted({link for _, link in self.shared.heard})}}

    def report(self) -> dict:
        return {"qos": self._state}

    def snapshot(self) -> Snapshot:
        events, self.enforcer.refusals = self.enforcer.refusals, []
        return Snapshot(events=events, info={"qos": self._state})

    def stop(self) -> None:
        if self.pacer is not None:
            self.pacer.release()
        self.enforcer.remove()
