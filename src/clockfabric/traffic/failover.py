"""Failover and restore, run by the agent: heartbeats in, decisions out, routes programmed.

One thread. Every `interval_s` it reads the heartbeats, judges each peer's planes, feeds
the decider and programs the routes it asks for; a local link event (the agent's
LinkWatcher calls `wake()`) runs the same at once, so a NIC that goes down moves the
traffic within milliseconds and the next heartbeats tell the peers to move theirs; the
heartbeat sockets are bound again first, where a NIC came back as another device.

A plane is healthy toward a peer when our NIC on it is up, the peer's is up (it says so),
and every heartbeat path of the plane works in both directions: a flow may hash onto any
of them. Every decision is kept (with the flows it moved) for the controller and the
state file.

With a `SteerPolicy` (transparent mode, steer.py) the same thread also moves single TCP flows
off a plane that is congested toward their peer, from the queueing the heartbeats measure, and
never onto a plane this thread does not use toward that peer.
"""

from __future__ import annotations

import logging
import os
import random
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass

from clockfabric.auth.seal import Sealer
from clockfabric.traffic import flows
from clockfabric.traffic.decide import Decider, Decision, Policy
from clockfabric.traffic.heartbeat import Liveness
from clockfabric.traffic.routes import PlaneRoutes, RouteError
from clockfabric.traffic.steer import Steering
from clockfabric.traffic.steer_decide import Move, SteerPolicy

log = logging.getLogger(__name__)
KEEP_DECISIONS = 1000
SENDERS = 6  # send-only heartbeat sockets per plane (ports 7292-7297): candidates to put paths on spines


@dataclass(frozen=True)
class Heartbeats:
    """How the heartbeats run: one every `interval_s` on each path, a path dead after
    `detect_mult` missed; `ports` paths a plane from `base_port` on, and `senders` send-only
    sockets a plane that the paths can be moved onto (with a tracer)."""

    interval_s: float = 0.1
    detect_mult: int = 3
    ports: int = 2
    base_port: int = 7290
    senders: int = SENDERS
    sealer: Sealer | None = None  # signs and checks them with the fleet key (None: unsigned)


class Failover(threading.Thread):
    def __init__(self, address: str, peers: dict[str, str], nics: dict[int, str], *,
                 nic_up: Callable[[str], bool | None], policy: Policy | None = None,
                 heartbeats: Heartbeats = Heartbeats(), on_decision: Callable[[], None] | None = None,
                 steer: SteerPolicy | None = None, trace: Callable[..., dict] | None = None,
                 relearn_s: float = 300.0):
        """`peers`: name -> stable address (not this host); `nics`: plane -> NIC name;
        `nic_up(name)`: the NIC's link state now (None: unknown, taken as up); `trace`:
        probe.paths.trace, to put each peer's heartbeat paths on distinct spines (None: by chance)."""
        super().__init__(name="failover", daemon=True)
        self.address = address
        self.peers = peers
        self.nics = nics
        self.nic_up = nic_up
        self.interval_s = heartbeats.interval_s
        self.on_decision = on_decision
        self.live = Liveness(address, peers, nics, ports=heartbeats.ports, base_port=heartbeats.base_port,
                             interval_s=heartbeats.interval_s, detect_mult=heartbeats.detect_mult,
                             session=random.getrandbits(32), senders=heartbeats.senders if trace else 0,
                             sealer=heartbeats.sealer)
        self.trace, self.relearn_s = trace, relearn_s
        self.spines: dict[str, dict[int, dict[int, str | None]]] = {}  # peer -> plane -> path -> spine it takes
        self.routes = PlaneRoutes(address, nics)
        self.decider = Decider(tuple(sorted(nics)), policy or Policy())
        self.decisions: deque[dict] = deque(maxlen=KEEP_DECISIONS)
        self.seq = 0
        self.isolated = False
        self.counters = {"route_changes": 0, "route_errors": 0}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._reconcile()
        self.steering: Steering | None = None
        self.steer_state: dict = {}
        if steer is not None:
            self.steering = Steering(address, peers, nics, self.routes.gateways, steer)
            for m in self.steering.reconcile(time.monotonic()):
                self._record_move(m)

    def _reconcile(self) -> None:
        """Adopt the routes a previous run left in the kernel (fail-static: they kept working)."""
        by_address = {a: n for n, a in self.peers.items()}
        now = time.monotonic()
        for address, planes in self.routes.installed().items():
            peer = by_address.get(address)
            if peer is None:  # not a peer any more: its route is ours to remove
                self.routes.unpin(address)
                continue
            self.decider.adopt(peer, planes, now)
            self._record(Decision(now, "adopted", peer, planes, "route left by a previous run"))

    # ---- lifecycle
    def wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def stop(self) -> None:
        self._stopping.set()
        self.wake()

    def run(self) -> None:
        if self.trace:
            threading.Thread(target=self._place_paths, args=(self.trace,), name="heartbeat-paths",
                             daemon=True).start()
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        next_send = time.monotonic()
        try:
            while not self._stopping.is_set():
                woken = poller.poll(max(0.0, next_send - time.monotonic()) * 1000)
                if woken:  # a link changed: a NIC back as another device is bound to again first
                    os.read(self._wake_r, 4096)
                    if moved := self.live.rebind():
                        log.info("heartbeat sockets bound again to %s: a new device under the same name",
                                 ", ".join(sorted(moved)))
                now = time.monotonic()
                up = self._up_planes()
                self.live.tick(now)
                self._evaluate(now, up)
                if self.steering:
                    self._steer(self.steering, now, up)
                if woken or now >= next_send:  # after a link event, tell the peers at once
                    self.live.send(now, sum(1 << p for p in self.nics if p not in up), up)
                if now >= next_send:
                    next_send = max(next_send + self.interval_s, now)
        except Exception:
            log.exception("failover stopped on an error; the routes it set stay (fail-static)")
        finally:
            self.live.close()
            self.routes.close()
            if self.steering:  # its rules stay in the kernel too: a restarted agent adopts them
                self.steering.close()
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)

    def _place_paths(self, trace: Callable[..., dict]) -> None:
        """Trace every peer's heartbeat paths and put them on distinct spines; again every
        relearn_s (a fabric that changed elsewhere moves the hash). Its own thread: a trace can
        wait a second for answers, and heartbeats must not. A peer with a path down or routed
        away is left as placed: re-placing its paths now would hide the failure."""
        warned: set[str] = set()
        while True:
            for peer, address in self.peers.items():
                if self._stopping.is_set():
                    return
                try:
                    busy = bool(self.live.dead_in(peer)) or peer in self.decider.pinned() \
                        or peer in self.decider.unreachable
                except RuntimeError:  # the failover thread changed its books under us: next round
                    busy = True
                if busy:
                    continue
                for plane, nic in self.nics.items():
                    if self.nic_up(nic) is False:
                        continue
                    flows = [(sport, self.live.base_port + k) for sport in self.live.candidates(plane)
                             for k in range(self.live.ports)]
                    try:
                        found = trace(self.address, address, flows, proto="udp", ttl=2, device=nic)
                    except Exception as e:  # noqa: BLE001 - no raw sockets, no route: left as the hash put them
                        if str(e) not in warned:
                            warned.add(str(e))
                            log.warning("heartbeat paths to %s stay where the hash put them: %s", peer, e)
                        continue
                    hops: dict[int, dict[int, str | None]] = {}
                    for (sport, dport), hop in found.items():
                        hops.setdefault(dport - self.live.base_port, {})[sport] = hop
                    self.spines.setdefault(peer, {})[plane] = self.live.place(peer, plane, hops)
            if self._stopping.wait(self.relearn_s):
                return

    # ---- judging
    def _up_planes(self) -> set[int]:
        return {p for p, nic in self.nics.items() if self.nic_up(nic) is not False}

    def _evaluate(self, now: float, up: set[int]) -> None:
        if not up:
            if not self.isolated:
                self.isolated = True
                self._record(Decision(now, "isolated", "", (),
                                      "every NIC of this host is down; routes left as they are"))
            return
        if self.isolated:
            self.isolated = False
            self._record(Decision(now, "reconnected", "", tuple(sorted(up))))
        for peer in self.peers:
            if peer not in self.live.reports:
                continue  # never heard: no agent there (yet), so no evidence either way
            if self.live.silent(peer, now):
                if peer not in self.decider.unreachable:
                    self.decider.unreachable.add(peer)
                    self._record(Decision(now, "unreachable", peer, (), "no heartbeat on any path; routes left"))
                continue
            health, reasons = self._health(peer, now, up)
            for d in self.decider.observe(now, peer, health, "; ".join(reasons)):
                if d.kind == "moved":
                    self._move(d)
                else:
                    self._record(d)

    def _health(self, peer: str, now: float, up: set[int]) -> tuple[dict[int, bool], list[str]]:
        report = self.live.reports[peer]
        dead_in = set(self.live.dead_in(peer))
        health, reasons = {}, []
        for plane, nic in self.nics.items():
            why = []
            if plane not in up:
                why.append(f"local {nic} down")
            if report.nics_down >> plane & 1:
                why.append(f"{peer} reports its plane-{plane} NIC down")
            quiet = [k for p, k in dead_in if p == plane]
            if quiet:
                why.append(f"no heartbeats from {peer} on plane {plane} port {','.join(map(str, quiet))}")
            deaf = [k for k in range(self.live.ports) if report.dead_in & self.live.bit(plane, k, self.live.ports)]
            if deaf:
                why.append(f"{peer} hears nothing from us on plane {plane} port {','.join(map(str, deaf))}")
            health[plane] = not why
            reasons += why
        return health, reasons

    def _move(self, d: Decision) -> None:
        address = self.peers[d.peer]
        try:
            if d.planes == self.decider.planes:
                self.routes.unpin(address)
            else:
                self.routes.pin(address, d.planes)
            self.counters["route_changes"] += 1
        except RouteError as e:
            self.counters["route_errors"] += 1
            log.warning("failover: %s", e)
            self._record(d, error=str(e))
            return
        self._record(d, flows=flows.to_peers({address}).get(address, []))

    def _steer(self, steering: Steering, now: float, up: set[int]) -> None:
        usable, queues = {}, {}
        for peer in self.peers:
            if peer not in self.live.reports or peer in self.decider.unreachable or self.live.silent(peer, now):
                continue
            usable[peer] = tuple(p for p in self.decider.routed.get(peer, self.decider.planes) if p in up)
            queues[peer] = self.live.out_queues(peer)
        for m in steering.tick(now, queues, usable):
            self._record_move(m)
        self.steer_state = steering.state()

    def _record_move(self, m: Move) -> None:
        kind = m.kind if m.kind in ("steered", "unsteered") else f"steer_{m.kind}"
        self._record(Decision(m.t, kind, m.peer, () if m.plane is None else (m.plane,), m.reason),
                     flow=str(m.flow), origin=m.origin)

    def _record(self, d: Decision, **extra) -> None:
        with self._lock:
            self.seq += 1
            record = {"seq": self.seq, "t_ns": time.time_ns(), **asdict(d), **extra}
            del record["t"]  # monotonic: meaningless outside this process
            self.decisions.append(record)
        log.info("failover %s %s planes=%s %s%s", d.kind, d.peer, list(d.planes), d.reason,
                 f" flow {extra['flow']}" if "flow" in extra else "")
        if self.on_decision:
            self.on_decision()

    # ---- reading (any thread)
    def events(self, after_seq: int = 0) -> list[dict]:
        with self._lock:
            return [d for d in self.decisions if d["seq"] > after_seq]

    def state(self) -> dict:
        return {"pinned": {p: list(planes) for p, planes in self.decider.pinned().items()},
                "unreachable": sorted(self.decider.unreachable), "isolated": self.isolated,
                "peers_heard": len(self.live.reports), "paths": len(self.live.socks),
                "spines": {peer: {str(p): list(paths.values()) for p, paths in planes.items()}
                           for peer, planes in self.spines.items()},
                "counters": self.counters | self.live.counters,
                "decisions": self.events(max(0, self.seq - 50))} | (
                    {"steer": self.steer_state} if self.steering else {})
