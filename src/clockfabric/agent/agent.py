"""The host agent: a router of services (service.py) around a probe engine and a control port.

One agent per host, in a lab namespace or on a real machine; nothing in here knows which.
The probe engine runs in its own thread (timestamps and coded pairs want a quick hand);
everything else happens in the main loop: each control message goes to the service that
handles its type; a service is polled when the time it asked for comes and after a message of
its own that it did not say moves nothing sooner (service.Polls), and polled and ticked once
per update; after each update their reports are published as the host's state file.
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

from clockfabric import wirejson
from clockfabric.agent.config import CONTROL_PORT, AgentConfig
from clockfabric.agent.context import AgentContext
from clockfabric.agent.push import link_payload
from clockfabric.agent.service import Polls, Router, Service, Snapshot, Supervisor, chosen
from clockfabric.auth.keys import Keyring
from clockfabric.auth.seal import CONTROL, HEARTBEAT, PROBE, Rejected, Sealer
from clockfabric.clock.vclock import CLOCK_ENV, SystemClock, VirtualClock
from clockfabric.errors import ClockfabricError
from clockfabric.probe import timestamping
from clockfabric.probe.engine import ProbeEngine
from clockfabric.telemetry.link_watcher import LinkWatcher

log = logging.getLogger(__name__)
MAX_MESSAGE = 65_000
AGENT_NICE = -5
RECHECK_S = 0.01  # how often a lab host's clock file is looked at for a step, at most
# what a collective rank on this host asks its agent (collective/claims.py): unsealed, so taken
# only from this host's own address, which the kernel never accepts from outside (accept_local)
RANK_MESSAGES = frozenset({"place", "loads", "release"})


def fleet_keys(cfg: AgentConfig) -> Keyring | None:
    """The fleet keys, or None where the operator said --insecure; no key and no --insecure: refused."""
    if cfg.key_file is not None:
        return Keyring.load(cfg.key_file)
    if not cfg.insecure:
        raise ClockfabricError("the agent needs --key-file (the fleet keys that seal its probes, heartbeats and "
                               "control messages); --insecure runs without one, and lets any host on the "
                               "fabric forge probe replies and clock maps")
    log.warning("INSECURE: no fleet key; any host on the fabric can move this host's clock or silence its paths")
    return None


def raise_priority() -> None:
    """Nice -5 before any thread starts, so all inherit it: failover must act in ms on a host busy
    with a job. A service manager may have set it already (systemd's Nice=), with no capability."""
    if os.getpriority(os.PRIO_PROCESS, 0) <= AGENT_NICE:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, 0, AGENT_NICE)
    except PermissionError:
        log.info("running at normal priority (raising it needs root, CAP_SYS_NICE or systemd's Nice=)")


def _plain_json(data: bytes) -> bool:
    try:
        wirejson.loads(data)
    except ValueError:  # UnicodeDecodeError and TooDeep too
        return False
    return True


class ReloadingClock:
    """The lab host's virtual clock, re-read when `lab clock step` rewrites its file.

    The file is looked at whenever the clock is read, at most every RECHECK_S: a real clock's
    step shows in the next timestamp, and a step seen only at the agent's next tick (a second
    later, more on a loaded machine) would charge that lag to clock sync's re-convergence."""

    def __init__(self, path: str):
        self.path = path
        self.mtime = 0.0
        self.clock = self._load()
        self._recheck_at = time.monotonic() + RECHECK_S

    def _load(self) -> VirtualClock:
        self.mtime = os.stat(self.path).st_mtime
        return VirtualClock.load(self.path)

    def refresh(self) -> None:
        try:
            if os.stat(self.path).st_mtime != self.mtime:
                self.clock = self._load()
        except (OSError, ValueError) as e:  # mid-rewrite: keep the last good model
            log.warning("clock file %s: %s", self.path, e)

    def _current(self) -> VirtualClock:
        now = time.monotonic()
        if now >= self._recheck_at:  # the probe engine's thread and the agent's both read it
            self._recheck_at = now + RECHECK_S
            self.refresh()
        return self.clock

    def local_ns(self, real_ns: int) -> int:
        return self._current().local_ns(real_ns)

    def now_ns(self) -> int:
        return self._current().now_ns()

    def set_ns(self) -> int:
        return self._current().set_ns()


class Agent:
    def __init__(self, cfg: AgentConfig):
        self.cfg = cfg
        raise_priority()
        topo = cfg.topology
        address = str(topo.hosts[cfg.host].address)
        addresses = {h: str(topo.hosts[h].address) for h in topo.hosts}
        clock = ReloadingClock(os.environ[CLOCK_ENV]) if os.environ.get(CLOCK_ENV) else SystemClock()
        rails = [n.name for n in topo.hosts[cfg.host].nics]
        self.keys = fleet_keys(cfg)
        self.sealers = {channel: Sealer(channel, address, self.keys) for channel in (PROBE, HEARTBEAT, CONTROL)}
        self._reload_keys = threading.Event()
        self.timestamping = {r: timestamping.capabilities(r).mode for r in rails}
        try:
            engine = ProbeEngine(address, addresses, cfg.probed, rails=rails, ports=cfg.ports,
                                 base_port=cfg.base_port, interval_s=cfg.probe_interval_s(),
                                 local_ns=clock.local_ns, seed=cfg.seed, marking=cfg.probe_marking(),
                                 sealer=self.sealers[PROBE])
            control = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            control.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, cfg.probe_dscp << 2)  # clock reports: time traffic
            control.bind((address, CONTROL_PORT))
        except OSError as e:
            raise ClockfabricError(f"cannot open probe ports on {address} ({e.strerror}): is this host "
                                   f"{cfg.host}, and is no other agent running on it?") from None
        control.setblocking(False)
        self.ctx = AgentContext(cfg, address, addresses, rails, clock, engine, control, LinkWatcher(rails),
                                publish=lambda: self._publish(clock.now_ns()), push_snapshot=self._for_controller,
                                sealers=self.sealers)
        # a NIC back as a new device (replaced, a cable moved away and back) is probed through again
        self.ctx.on_link_change.append(engine.rebind)
        # a link going down is acted on and pushed at once, not at the next update
        self.ctx.links.on_change = self.ctx.link_changed
        try:
            self.ctx.links.start()
        except Exception as e:  # noqa: BLE001 - no netlink here: services do without link events
            log.info("no link events (%s)", e)
        self._links_seen = 0
        self.services = [entry.factory(self.ctx) for entry in chosen(cfg)]
        self.router = Router(self.services)
        self.polls = Polls(self.services)
        self.supervisor = Supervisor()
        self.stopping = threading.Event()
        self.state_path = cfg.state_dir / f"{cfg.host}.json"

    def run(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stopping.set())
        signal.signal(signal.SIGHUP, lambda *_: self._reload_keys.set())  # read in the loop: the handler takes no lock
        ctx = self.ctx
        ctx.engine.start()
        for s in self.services:
            s.start()
        sel = selectors.DefaultSelector()
        sel.register(ctx.control, selectors.EVENT_READ)
        next_tick = time.monotonic() + self.cfg.update_s
        try:
            while not self.stopping.is_set():
                if sel.select(max(0.0, min(next_tick, self.polls.next_s()) - time.monotonic())):
                    self._receive()
                if self._reload_keys.is_set() and self.keys is not None:
                    self._reload_keys.clear()
                    self.keys.reload()
                self._poll(self.polls.due(time.monotonic(), self.router.taken()))
                if time.monotonic() >= next_tick:
                    self._tick()
                    next_tick += self.cfg.update_s
        finally:
            for s in reversed(self.services):
                self.supervisor.call(s, s.stop, default=None)  # the others are stopped too
            ctx.engine.stop()
            ctx.engine.join(2)
            sel.close()
            ctx.control.close()
            ctx.links.stop()

    def _receive(self) -> None:
        while True:
            try:
                data, (src, sport) = self.ctx.control.recvfrom(MAX_MESSAGE)
            except BlockingIOError:
                return
            if src not in self.ctx.engine.names:  # only lab/fleet hosts may talk to us
                self.router.bad_messages += 1
                continue
            if src == self.ctx.address and _plain_json(data):  # a rank's request (a sealed one has a trailer)
                self.router.deliver(data, (src, sport), RANK_MESSAGES)
                continue
            try:
                opened = self.sealers[CONTROL].open(data, src)
            except Rejected:  # counted by the sealer, by reason
                continue
            self.router.deliver(opened.payload, (src, sport))

    def _poll(self, services: list[Service]) -> None:
        for s in services:
            now_s = time.monotonic()
            self.polls.asked(s, self.supervisor.call(s, s.poll, now_s, default=math.inf))

    def _tick(self) -> None:
        self._poll(self.services)  # what completed since the last poll: the fits see it before the report
        now = self.ctx.clock.now_ns()
        for s in self.services:
            self.supervisor.call(s, s.tick, now, default=None)
        self._publish(now)

    def _for_controller(self) -> tuple[list[dict], list[dict], dict]:
        """What the pusher sends (from its thread): new link events, in global time once this
        host is synced, every link's state, and each service's part."""
        ctx = self.ctx
        events, samples, self._links_seen = link_payload(ctx.links, self._links_seen, ctx.to_time)
        info = {"address": ctx.address, "pid": os.getpid(), "reference": self.cfg.reference}
        for s in self.services:
            part = self.supervisor.call(s, s.snapshot, default=Snapshot())
            events += part.events
            samples += part.samples
            info.update(part.info)
        info.update(self.supervisor.report())
        return events, samples, info

    def _publish(self, now: int) -> None:
        engine = self.ctx.engine
        state = {"host": self.cfg.host, "pid": os.getpid(), "updated_local_ns": now,
                 "reference": self.cfg.reference, "timestamping": self.timestamping, "paths": engine.paths,
                 "counters": dict(engine.counters, bad_control_messages=self.router.bad_messages),
                 "auth": {"secure": self.keys is not None, "key_ids": self.keys.ids() if self.keys else [],
                          "rejected": {s.channel: dict(s.rejected) for s in self.sealers.values()}}}
        for s in self.services:
            state.update(self.supervisor.call(s, s.report, default={}))
        state.update(self.supervisor.report())
        self.ctx.latest = state
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.state_path)
