"""The host agent: probes its peers, keeps its clock mapping current, publishes its state.

One agent per host, in a lab namespace or on a real machine; nothing in here knows which.
The probe engine runs in its own thread (timestamps and coded pairs want a quick hand);
everything else happens once per update in the main loop: fit the pairs, report to the
solver, take the mapping back, write the state file. The agent on the reference host
also runs the solver.
"""

from __future__ import annotations

import json
import logging
import math
import os
import selectors
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from clockfabric import lldp
from clockfabric.agent.metrics import AgentMetrics, serve
from clockfabric.agent.pathmap import PathMapper, first_switches
from clockfabric.agent.push import Pusher, link_payload, neighbour_samples
from clockfabric.clock.graph import probe_peers
from clockfabric.clock.service import HostSync, Solver
from clockfabric.collective.claims import AGENT_PORT, Ledger
from clockfabric.errors import ClockfabricError
from clockfabric.lab.vclock import CLOCK_ENV, SystemClock, VirtualClock
from clockfabric.probe import timestamping, wire
from clockfabric.probe.engine import ProbeEngine
from clockfabric.probe.paths import trace
from clockfabric.telemetry.amd_gpu import AmdGpuCollector
from clockfabric.telemetry.base import Collectors
from clockfabric.telemetry.links import LinkCollector, LinkWatcher
from clockfabric.telemetry.lldp_neighbours import LldpCollector
from clockfabric.telemetry.nic import NicCollector
from clockfabric.telemetry.nvidia_gpu import NvidiaGpuCollector
from clockfabric.telemetry.rdma import RdmaCollector
from clockfabric.topology import Topology, interfaces

if TYPE_CHECKING:
    from clockfabric.traffic.failover import Failover

log = logging.getLogger(__name__)
CONTROL_PORT = AGENT_PORT  # clock reports and maps, and collective ranks' spine claims
METRICS_PORT = 9470
MAX_MESSAGE = 65_000
AGENT_NICE = -5
# after a host reports a clock step, the solver waits this long for its neighbours' reports
URGENT_SOLVE_S = 0.05


@dataclass
class AgentConfig:
    host: str
    topology: Topology
    state_dir: Path
    peers: int = 10
    reference: str | None = None  # the host whose clock is global time; default the first by name
    window_s: float = 2.0
    update_s: float = 1.0
    probe_rate: float = 20.0  # exchanges per second this host starts, over all its peers: what its CPU pays for
    quiet_rate: float = 10.0  # the same while the clock is settled and the fabric quiet (HostSync.settled)
    probe_budget: float = 0.0005  # of the host's slowest link, for its probes and replies: a cap on slow links
    ports: int = 4  # UDP ports per rail: paths through ECMP
    base_port: int = 7300
    metrics_port: int = METRICS_PORT  # Prometheus /metrics on the host's address; 0: none
    controller: str | None = None  # the controller's URL (http://host:port or https://...): push to it
    token: str = ""  # the fleet token the controller wants
    ca_file: str | None = None  # to verify an https controller with a private CA
    failover: bool | None = None  # move traffic off failed planes; None: on when the host has two or more
    failover_interval_s: float = 0.1  # heartbeats per path; a path is dead after three missed
    hold_down_s: float = 5.0  # a recovered plane carries traffic again after this long healthy
    steer: bool = False  # transparent mode: move single TCP flows off a plane congested toward their peer
    lldp_interval_s: float = 5.0  # announce "host, NIC" by LLDP this often (lldpd's 30 s); 0: only listen
    seed: int = 0
    probed: list[str] = field(init=False)

    def __post_init__(self):
        hosts = list(self.topology.hosts)
        if self.host not in self.topology.hosts:
            raise ClockfabricError(f"host {self.host!r} is not in the topology; hosts are {', '.join(hosts[:5])}...")
        self.reference = self.reference or min(hosts)
        if self.reference not in self.topology.hosts:
            raise ClockfabricError(f"reference {self.reference!r} is not a host of the topology")
        self.probed = probe_peers(hosts, self.peers, self.seed)[self.host]
        if self.failover is None:
            self.failover = len(self.topology.hosts[self.host].nics) > 1
        if self.steer and not self.failover:
            raise ClockfabricError("--steer needs failover's heartbeats (they measure each plane's queueing): "
                                   "drop --no-failover; the host needs two or more NICs")

    def probe_interval_s(self, *, quiet: bool = False) -> float:
        """Seconds between exchanges with each peer: the probe rate, slowed to stay in the budget."""
        rate = min(link.rate_bps for link in self.topology.links_of(self.host))
        k = max(1, len(self.probed))
        bytes_per_round = k * wire.exchange_wire_bytes()  # each host probes k and answers ~k
        wanted = min(self.quiet_rate, self.probe_rate) if quiet else self.probe_rate
        return min(1.0, max(k / wanted, bytes_per_round / (self.probe_budget * rate / 8)))


class ReloadingClock:
    """The lab host's virtual clock, re-read when `lab clock step` rewrites its file."""

    def __init__(self, path: str):
        self.path = path
        self.mtime = 0.0
        self.clock = self._load()

    def _load(self) -> VirtualClock:
        self.mtime = os.stat(self.path).st_mtime
        return VirtualClock.load(self.path)

    def refresh(self) -> None:
        try:
            if os.stat(self.path).st_mtime != self.mtime:
                self.clock = self._load()
        except (OSError, ValueError) as e:  # mid-rewrite: keep the last good model
            log.warning("clock file %s: %s", self.path, e)

    def local_ns(self, real_ns: int) -> int:
        return self.clock.local_ns(real_ns)

    def now_ns(self) -> int:
        return self.clock.now_ns()


class Agent:
    def __init__(self, cfg: AgentConfig):
        self.cfg = cfg
        try:  # before any thread starts, so all inherit it: failover must act in ms on a host busy with a job
            os.setpriority(os.PRIO_PROCESS, 0, AGENT_NICE)
        except PermissionError:
            log.info("running at normal priority (raising it needs root)")
        topo = cfg.topology
        me = topo.hosts[cfg.host]
        self.address = str(me.address)
        self.addresses = {h: str(topo.hosts[h].address) for h in topo.hosts}
        self.clock = ReloadingClock(os.environ[CLOCK_ENV]) if os.environ.get(CLOCK_ENV) else SystemClock()
        rails = [n.name for n in me.nics]
        self.timestamping = {r: timestamping.capabilities(r).mode for r in rails}
        # seconds between exchanges with a peer, at the full and the quiet rate (worked out once:
        # it walks the topology's links); the full rate until the clock has settled
        self._intervals = {False: cfg.probe_interval_s(), True: cfg.probe_interval_s(quiet=True)}
        self.interval_s = self._intervals[False]
        try:
            self.engine = ProbeEngine(self.address, self.addresses, cfg.probed, rails=rails,
                                      ports=cfg.ports, base_port=cfg.base_port, interval_s=self.interval_s,
                                      local_ns=self.clock.local_ns, seed=cfg.seed)
            self.control = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.control.bind((self.address, CONTROL_PORT))
        except OSError as e:
            raise ClockfabricError(f"cannot open probe ports on {self.address} ({e.strerror}): is this host "
                                   f"{cfg.host}, and is no other agent running on it?") from None
        self.control.setblocking(False)
        self.sync = HostSync(cfg.host, cfg.probed, window_ns=int(cfg.window_s * 1e9))
        # spine claims of the collective jobs under this host's leaves (collective/claims.py)
        self.ledger = Ledger()
        leaf = first_switches(topo)
        mine = {leaf[(cfg.host, n.plane)] for n in me.nics if (cfg.host, n.plane) in leaf}
        self.leafmates = sorted({h for (h, _), sw in leaf.items() if sw in mine} - {cfg.host})
        self.switch_of = {str(i.address.ip): i.port.node for i in interfaces(topo).values()}
        self._claims_told = False
        self.placements = 0
        self.solver = Solver(list(topo.hosts), cfg.reference, stale_s=3 * cfg.update_s) \
            if cfg.host == cfg.reference else None
        self._solve_due = math.inf
        self.bad_messages = 0
        self.stopping = threading.Event()
        self.state_path = cfg.state_dir / f"{cfg.host}.json"
        self.latest: dict | None = None  # the last published state, whole: what /metrics reads
        # which spine each probe path crosses: the controller names congested links with it
        self.path_map = PathMapper(topo, cfg.host, cfg.probed, self.engine.flows,
                                   on_change=self._on_decision) if cfg.controller else None
        self.pusher = Pusher(cfg.controller, cfg.token, cfg.host, snapshot=self._for_controller,
                             interval_s=cfg.update_s, verify=cfg.ca_file or True,
                             paths=lambda: self.path_map.rows) if cfg.controller else None
        # a link going down is acted on and pushed at once, not at the next update
        self.links = LinkWatcher(rails, on_change=self._on_link_change)
        self._links_seen = 0
        self.failover = self._failover(me) if cfg.failover else None
        self._decisions_seen = 0
        self.neighbours, self.lldp = lldp.for_ports(cfg.host, rails, cfg.lldp_interval_s)
        self.collectors = Collectors([NicCollector(rails), LinkCollector(self.links), LldpCollector(self.neighbours),
                                      RdmaCollector(), NvidiaGpuCollector(), AmdGpuCollector()])
        self.metrics_server = None
        if cfg.metrics_port:
            try:
                self.metrics_server = serve(AgentMetrics(cfg.host, self.collectors, lambda: self.latest),
                                            self.address, cfg.metrics_port)
            except OSError as e:
                raise ClockfabricError(f"cannot serve /metrics on {self.address}:{cfg.metrics_port} ({e.strerror}): "
                                       f"give another --metrics-port, or 0 for none") from None

    def _failover(self, me) -> Failover:
        # only hosts with two or more NICs load the failover stack (pyroute2 alone is ~0.2 s of
        # start-up: 32 agents starting on two cores wait for each other's imports)
        from clockfabric.traffic.decide import Policy
        from clockfabric.traffic.failover import Failover
        from clockfabric.traffic.steer import SteerPolicy

        nics = {n.plane: n.name for n in me.nics}
        peers = {h: a for h, a in self.addresses.items() if h != self.cfg.host}
        try:
            self.links.start()
        except Exception as e:  # noqa: BLE001 - heartbeats still see every failure, a little later
            log.warning("failover without link events (%s): local failures are seen by heartbeats only", e)

        def nic_up(name: str) -> bool | None:
            state = self.links.state(name) if self.links.running else None
            return None if state is None else state.up

        try:
            return Failover(self.address, peers, nics, nic_up=nic_up, interval_s=self.cfg.failover_interval_s,
                            policy=Policy(hold_down_s=self.cfg.hold_down_s), on_decision=self._on_decision,
                            steer=SteerPolicy() if self.cfg.steer else None, trace=trace)
        except OSError as e:
            raise ClockfabricError(f"cannot open failover heartbeat ports on {self.address} ({e.strerror}): "
                                   "is another agent running on this host?") from None

    def _on_link_change(self) -> None:
        if self.failover:
            self.failover.wake()
        if self.path_map:
            self.path_map.wake()
        if self.pusher:
            self.pusher.wake()

    def _on_decision(self) -> None:  # a failover decision, or a new path map: tell the controller now
        if self.pusher:
            self.pusher.wake()

    def run(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stopping.set())
        self.engine.start()
        if self.lldp:
            self.lldp.start()
        if self.failover:
            self.failover.start()
        if self.pusher:
            self.pusher.add_events([{"t_ns": time.time_ns(), "synced": False, "kind": "agent_start",
                                     "detail": {"pid": os.getpid()}}])
            self.pusher.start()
            self.path_map.start()
        sel = selectors.DefaultSelector()
        sel.register(self.control, selectors.EVENT_READ)
        next_tick = time.monotonic() + self.cfg.update_s
        try:
            while not self.stopping.is_set():
                due = min(next_tick, self._solve_due)
                if sel.select(max(0.0, min(0.2, due - time.monotonic()))):
                    self._receive()
                self._take_exchanges()
                if time.monotonic() >= self._solve_due:
                    self._solve(urgent=True)
                if time.monotonic() >= next_tick:
                    self._tick()
                    next_tick += self.cfg.update_s
        finally:
            if self.failover:  # its routes stay in the kernel: a restarted agent adopts them
                self.failover.stop()
                self.failover.join(2)
            self.engine.stop()
            self.engine.join(2)
            if self.lldp:
                self.lldp.stop()
            sel.close()
            self.control.close()
            if self.metrics_server:
                self.metrics_server.shutdown()
            if self.pusher:
                self.path_map.stop()
                self.pusher.stop()
                self.pusher.join(6)
            self.links.stop()
            self.collectors.close()

    def _receive(self) -> None:
        while True:
            try:
                data, (src, sport) = self.control.recvfrom(MAX_MESSAGE)
            except BlockingIOError:
                return
            if src not in self.engine.names:  # only lab/fleet hosts may talk to us
                self.bad_messages += 1
                continue
            try:
                msg = json.loads(data)
                if msg["t"] == "report" and self.solver:
                    self.solver.on_report(msg)
                    if msg.get("urgent"):  # a clock stepped: solve soon, once its neighbours also said so
                        self._solve_due = min(self._solve_due, time.monotonic() + URGENT_SOLVE_S)
                elif msg["t"] == "map":
                    self.sync.on_map(msg)
                    if msg.get("urgent"):
                        self._publish(self.clock.now_ns())
                elif msg["t"] == "stepped":
                    self.sync.on_stepped(self.engine.names[src], float(msg["delta_ns"]))
                elif msg["t"] == "place":
                    self._place(msg, (src, sport))
                elif msg["t"] == "release":
                    self.ledger.release(str(msg["job"]))
                    self._share_claims()  # at once: a job starting next must not count this one's
                elif msg["t"] == "loads":
                    self._loads(msg, (src, sport))
                elif msg["t"] == "claims" and msg["host"] in self.leafmates:
                    self.ledger.hear(msg["host"], msg["claims"])
            except (ValueError, KeyError, TypeError):
                self.bad_messages += 1

    def _place(self, msg: dict, reply_to: tuple[str, int]) -> None:
        """A collective rank's subflows to spines, by the leaf's ledger: answered at once."""
        wants = [(int(n), [str(h) for h in hops]) for n, hops in msg["want"]]
        named = self.ledger.place(str(msg["job"]), [(n, [self.switch_of.get(h, h) for h in hops]) for n, hops in wants])
        hops = [[next(h for h in hops if self.switch_of.get(h, h) == sw) for sw in chosen]
                for (_, hops), chosen in zip(wants, named)]
        data = json.dumps({"t": "placed", "job": msg["job"], "hops": hops}).encode()
        self.control.sendto(data, reply_to)
        self.placements += 1
        self._share_claims()

    def _loads(self, msg: dict, reply_to: tuple[str, int]) -> None:
        """How many subflows jobs under the leaf hold on each hop's spine: a rank sizes its windows by them."""
        counts = [self.ledger.load(self.switch_of.get(h, h)) for h in map(str, msg["hops"])]
        self.control.sendto(json.dumps({"t": "loads", "job": msg["job"], "loads": counts}).encode(), reply_to)

    def _share_claims(self) -> None:
        claims = self.ledger.shared()
        if claims or self._claims_told:  # and once more after the last release: mates forget at once
            for host in self.leafmates:
                self._send(host, {"t": "claims", "host": self.cfg.host, "claims": claims})
        self._claims_told = bool(claims)

    def _send(self, host: str, msg: dict) -> None:
        data = json.dumps(msg, separators=(",", ":")).encode()
        try:
            self.control.sendto(data, (self.addresses[host], CONTROL_PORT))
            self.engine.counters["control_bytes_sent"] += len(data) + wire.IP_UDP_ETH_OVERHEAD
        except OSError as e:
            log.debug("control message to %s: %s", host, e)

    def _take_exchanges(self) -> None:
        """Feed the pair fits as exchanges complete, so a clock step is seen in a fraction of
        a second; a step is reported (and told to the neighbours, if ours) at once."""
        exchanges = []
        while self.engine.exchanges:
            exchanges.append(self.engine.exchanges.popleft())
        self.sync.add(exchanges)
        while self.sync.told:
            delta = self.sync.told.pop()
            for host in sorted(set(self.sync.peer_maps) | set(self.sync.pairs)):
                self._send(host, {"t": "stepped", "host": self.cfg.host, "delta_ns": delta})
        if self.sync.urgent:
            self._pace(quiet=False)
            self._send(self.cfg.reference, self.sync.report(self.clock.now_ns()))

    def _pace(self, *, quiet: bool) -> None:
        """Probe at the quiet rate only while the clock needs no more: an agent's CPU follows
        its exchanges, and on a settled clock and an idle fabric half of them add little."""
        self.interval_s = self.engine.interval_s = self._intervals[quiet]

    def _solve(self, *, urgent: bool = False) -> None:
        self._solve_due = math.inf
        for host, msg in self.solver.solve(self.clock.now_ns()).items():
            self._send(host, {**msg, "urgent": True} if urgent else msg)

    def _tick(self) -> None:
        if isinstance(self.clock, ReloadingClock):
            self.clock.refresh()
        self._take_exchanges()
        now = self.clock.now_ns()
        self._send(self.cfg.reference, self.sync.report(now))
        self._pace(quiet=self.sync.settled(now))
        self._share_claims()
        if self.solver:
            self._solve()
        self._publish(now)

    def _for_controller(self) -> tuple[list[dict], list[dict], dict]:
        """What the pusher sends (from its thread): new link events, in global time once this
        host is synced, and as samples the latest one-way delays of its probe paths, link
        states and LLDP neighbours."""
        mapping = self.sync.mapping

        def to_time(real_ns: int) -> tuple[int, bool]:
            local = self.clock.local_ns(real_ns)
            return (mapping.global_ns(local), True) if mapping else (local, False)

        events, samples, self._links_seen = link_payload(self.links, self._links_seen, to_time)
        if self.failover:
            for d in self.failover.events(self._decisions_seen):
                self._decisions_seen = d["seq"]
                t_ns, synced = to_time(d["t_ns"])
                events.append({"t_ns": t_ns, "synced": synced, "kind": f"failover_{d['kind']}",
                               "device": d["peer"], "detail": {k: v for k, v in d.items()
                                                               if k not in ("seq", "t_ns", "kind", "peer")}})
        if self.neighbours:
            samples += neighbour_samples(self.neighbours.poll())
        state = self.latest or {}
        # the probes' own direction only: a reply travels another 5-tuple (another path, maybe
        # another spine) under the same path label, and the controller would mix the two
        for row in (r for r in state.get("owd", []) if r["src"] == self.cfg.host):
            labels = {"src": row["src"], "dst": row["dst"], "path": row["path"]}
            samples += [{"name": f"owd_{stat}_ns", "value": row[f"{stat}_ns"], "labels": labels}
                        for stat in ("min", "p50", "p99", "floor")]
        info = {"address": self.address, "pid": os.getpid(), "reference": self.cfg.reference,
                "synced": bool(mapping and mapping.synced), "telemetry_not_present": self.collectors.absent}
        return events, samples, info

    def _publish(self, now: int) -> None:
        state = {"host": self.cfg.host, "pid": os.getpid(), "updated_local_ns": now,
                 "reference": self.cfg.reference, "timestamping": self.timestamping,
                 "telemetry_not_present": self.collectors.absent,
                 "probe_interval_s": self.interval_s, "paths": self.engine.paths,
                 "counters": dict(self.engine.counters, bad_control_messages=self.bad_messages),
                 **self.sync.state()}
        if self.failover:
            state["failover"] = self.failover.state()
        state["claims"] = {"own": self.ledger.shared(), "placements": self.placements,
                           "heard": sorted(self.ledger.heard)}
        if self.path_map:
            state["path_map"] = [{"dst": peer, "path": label, "plane": plane, "via": via}
                                 for peer, label, plane, via in self.path_map.rows]
        if self.solver and self.solver.last is not None:
            state["solver"] = {"dropped_edges": int((~self.solver.last.kept).sum()),
                               "edges": len(self.solver.last.kept), "reports": len(self.solver.reports)}
        self.latest = state
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.state_path)

