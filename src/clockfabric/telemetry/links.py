"""Link state and flaps from netlink events, as they happen (no polling).

`LinkWatcher` listens on the rtnetlink link group (RTMGRP_LINK) of the namespace it runs
in (or of a named one), seeds each link's state with one dump, and turns every RTM_NEWLINK /
RTM_DELLINK that really changes a link's state into a `Transition` stamped the moment the
message was read. `LinkCollector` exports the watcher's view as metrics.

Layout, so each part can be tested on its own:
  parse_link(msg)   a netlink message (pyroute2's, or a plain dict of the same shape) -> LinkInfo
  LinkTracker       pure state machine: LinkInfo + time -> Transition or None; flap windows
  LinkWatcher       the socket and the thread around a LinkTracker
  LinkCollector     the collector interface (base.py) over a LinkWatcher

A link's state is (admin up, carrier, operstate). Netlink sends RTM_NEWLINK for many
reasons that are not state (statistics, MTU, alias, promiscuity, addresses): those repeat
the state the tracker already holds and make no transition. "Up" is what a user means by
it: admin up, and operstate UP (or UNKNOWN with carrier, as loopback, dummy and tun report).
A transition that flips up-ness is a "down" or an "up"; one that changes state without
flipping it (DOWN -> LOWERLAYERDOWN, say) is a "change". Flaps count only downs and ups.

Timing: the kernel puts no timestamp in a link notification, so each transition carries the
time the watcher read the message (taken right after recv returns, before parsing). The
watcher wakes on the socket (poll), so this is the kernel's notification time plus a
scheduling delay, typically well under a millisecond. Note the kernel itself may hold a
carrier change of a physical NIC in its linkwatch queue for up to a second before it
notifies; veths and other stacked links are notified at once.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Self

from clockfabric.telemetry.base import Metric

log = logging.getLogger(__name__)

RTMGRP_LINK = 0x1  # rtnetlink multicast group of link notifications (linux/rtnetlink.h)
IFF_UP = 0x1
IFF_LOWER_UP = 0x10000
AF_UNSPEC = 0  # link notifications proper; AF_BRIDGE ones are bridge-port news, not link state
UP_OPERSTATES = {"UP"}
EVENTS_MAX = 10_000
RECV_BYTES = 1 << 16
RCVBUF_BYTES = 1 << 20  # kernel-side queue; on overflow (ENOBUFS) the watcher re-dumps


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class LinkState:
    """What a link's state is: the three things netlink says about it."""

    admin_up: bool  # IFF_UP: someone set it up
    carrier: bool | None  # IFLA_CARRIER, else IFF_LOWER_UP; None when neither was sent
    operstate: str  # IFLA_OPERSTATE (RFC 2863): UP, DOWN, LOWERLAYERDOWN, UNKNOWN, DORMANT, ...

    @property
    def up(self) -> bool:
        if not self.admin_up:
            return False
        return self.operstate in UP_OPERSTATES or (self.operstate == "UNKNOWN" and self.carrier is not False)

    def as_dict(self) -> dict[str, Any]:
        return {"admin_up": self.admin_up, "carrier": self.carrier, "operstate": self.operstate, "up": self.up}


@dataclass(frozen=True)
class LinkInfo:
    """One link message, reduced to what the tracker needs."""

    index: int
    name: str | None
    state: LinkState | None  # None: the link is gone (RTM_DELLINK)
    carrier_changes: int | None = None


def _attr(msg: Any, name: str) -> Any:
    """An attribute of a pyroute2 message, or of a plain dict {"attrs": [(name, value), ...]}."""
    get_attr = getattr(msg, "get_attr", None)
    if callable(get_attr):
        return get_attr(name)
    for item in msg.get("attrs", ()):
        if item[0] == name:
            return item[1]
    return None


def parse_link(msg: Any) -> LinkInfo | None:
    """A link's identity and state from one RTM_NEWLINK / RTM_DELLINK, or None if the
    message is something else (another event, a bridge-port message, an error)."""
    event = msg.get("event")
    if event not in ("RTM_NEWLINK", "RTM_DELLINK"):
        return None
    if msg.get("family", AF_UNSPEC) != AF_UNSPEC:
        return None
    header = msg.get("header") or {}
    if header.get("error") is not None:
        return None
    index = msg.get("index")
    if not index:
        return None
    name = _attr(msg, "IFLA_IFNAME")
    changes = _attr(msg, "IFLA_CARRIER_CHANGES")
    changes = int(changes) if changes is not None else None
    if event == "RTM_DELLINK":
        return LinkInfo(int(index), name, None, changes)
    flags = int(msg.get("flags") or 0)
    carrier = _attr(msg, "IFLA_CARRIER")
    carrier = bool(carrier) if carrier is not None else bool(flags & IFF_LOWER_UP)
    operstate = _attr(msg, "IFLA_OPERSTATE")
    operstate = str(operstate).upper() if operstate is not None else "UNKNOWN"
    return LinkInfo(int(index), name, LinkState(bool(flags & IFF_UP), carrier, operstate), changes)


# --------------------------------------------------------------------------- state machine


@dataclass(frozen=True)
class Transition:
    """One real change of one link's state."""

    seq: int  # 1, 2, 3, ... in the order the watcher saw them
    t_ns: int  # when the message was read (the kernel sends no timestamp)
    device: str
    index: int
    kind: str  # "down" (was up, now not), "up" (the reverse), or "change" (state moved, up-ness did not)
    from_state: LinkState | None  # None: the link had just appeared
    to_state: LinkState | None  # None: the link is gone
    carrier_changes: int | None = None  # IFLA_CARRIER_CHANGES, when the kernel sent it
    resync: bool = False  # True: found by a re-dump after lost messages; t_ns is the re-dump's time

    def as_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq, "t_ns": self.t_ns, "device": self.device, "index": self.index, "kind": self.kind,
            "from": self.from_state.as_dict() if self.from_state else None,
            "to": self.to_state.as_dict() if self.to_state else None,
            "carrier_changes": self.carrier_changes, "resync": self.resync,
        }


@dataclass
class _Device:
    """What the tracker remembers per device name."""

    transitions: int = 0
    last_change_ns: int | None = None
    # (t_ns, "down" | "up") of each flip in the window, and (down_ns, up_ns) of each finished
    # down period in it; bounded too, for a link that flaps thousands of times a window
    flips: deque = field(default_factory=lambda: deque(maxlen=EVENTS_MAX))
    downs: deque = field(default_factory=lambda: deque(maxlen=EVENTS_MAX))
    down_since_ns: int | None = None
    carrier_changes: int | None = None


class LinkTracker:
    """Link states, transitions and flap windows, fed with LinkInfo; no sockets, no threads."""

    def __init__(self, devices: Iterable[str] | None = None, *, flap_window_s: float = 60.0,
                 max_events: int = EVENTS_MAX):
        self.only = set(devices) if devices is not None else None
        self.window_ns = int(flap_window_s * 1e9)
        self.flap_window_s = flap_window_s
        self.events: deque[Transition] = deque(maxlen=max_events)
        self.dropped = 0  # transitions pushed out of the full deque (oldest first)
        self.seq = 0
        self.states: dict[int, tuple[str, LinkState]] = {}  # ifindex -> (name, state)
        self.devices: dict[str, _Device] = {}

    def wanted(self, name: str | None) -> bool:
        if name is None:
            return False
        return name in self.only if self.only is not None else name != "lo"

    # -- feeding

    def seed(self, infos: Iterable[LinkInfo]) -> None:
        """Set the states from a dump, with no transitions (the start)."""
        self.states = {}
        for info in infos:
            if info.state is not None and self.wanted(info.name):
                self.states[info.index] = (info.name, info.state)
                self.devices.setdefault(info.name, _Device()).carrier_changes = info.carrier_changes

    def resync(self, infos: Iterable[LinkInfo], t_ns: int) -> list[Transition]:
        """A fresh dump after lost messages: whatever differs becomes a transition (resync=True)."""
        infos = [i for i in infos if i.state is not None]
        seen = {i.index for i in infos}
        out = [tr for i in infos if (tr := self.apply(i, t_ns, resync=True))]
        for index, (name, _) in list(self.states.items()):
            if index not in seen and (tr := self.apply(LinkInfo(index, name, None), t_ns, resync=True)):
                out.append(tr)
        return out

    def apply(self, info: LinkInfo, t_ns: int, *, resync: bool = False) -> Transition | None:
        """One message in; a Transition out if the link's state really changed."""
        old_name, old = self.states.get(info.index, (None, None))
        name = info.name or old_name
        if not self.wanted(name):
            self.states.pop(info.index, None)  # e.g. renamed away from what we watch
            return None
        if old_name is not None and old_name != name:
            old = None  # renamed: to the new name, the link has just appeared
        if info.state is None:
            self.states.pop(info.index, None)
        else:
            self.states[info.index] = (name, info.state)
        dev = self.devices.setdefault(name, _Device())
        if info.carrier_changes is not None:
            dev.carrier_changes = info.carrier_changes
        if old == info.state:
            return None  # a repeat: statistics, MTU, alias, ... or a duplicate
        was_up = old.up if old is not None else False
        now_up = info.state.up if info.state is not None else False
        kind = "down" if was_up and not now_up else "up" if now_up and not was_up else "change"
        self.seq += 1
        tr = Transition(self.seq, t_ns, name, info.index, kind, old, info.state,
                        info.carrier_changes if info.carrier_changes is not None else dev.carrier_changes, resync)
        if len(self.events) == self.events.maxlen:
            self.dropped += 1
        self.events.append(tr)
        dev.transitions += 1
        dev.last_change_ns = t_ns
        if kind != "change":
            dev.flips.append((t_ns, kind))
            if kind == "down":
                dev.down_since_ns = t_ns
            elif dev.down_since_ns is not None:
                dev.downs.append((dev.down_since_ns, t_ns))
                dev.down_since_ns = None
        self._trim(dev, t_ns)
        return tr

    # -- reading

    def _trim(self, dev: _Device, now_ns: int) -> None:
        start = now_ns - self.window_ns
        while dev.flips and dev.flips[0][0] < start:
            dev.flips.popleft()
        while dev.downs and dev.downs[0][1] < start:
            dev.downs.popleft()

    def since(self, since_ns: int | None = None, after_seq: int | None = None) -> list[Transition]:
        return [t for t in self.events
                if (since_ns is None or t.t_ns >= since_ns) and (after_seq is None or t.seq > after_seq)]

    def state(self, device: str) -> LinkState | None:
        for name, st in self.states.values():
            if name == device:
                return st
        return None

    def flaps(self, device: str, now_ns: int) -> dict[str, Any]:
        """Downs and ups of `device` in the last flap_window_s, and how long each down lasted."""
        dev = self.devices.get(device) or _Device()
        self._trim(dev, now_ns)
        return {
            "device": device,
            "window_s": self.flap_window_s,
            "count": len(dev.flips),  # downs and ups in the window
            "downs": sum(1 for _, kind in dev.flips if kind == "down"),
            "ups": sum(1 for _, kind in dev.flips if kind == "up"),
            # finished down periods (a down, then its up) whose up is in the window, oldest first
            "down_durations_s": [(b - a) / 1e9 for a, b in dev.downs],
            "down_since_ns": dev.down_since_ns,  # down now, since then (None: up, or down since before the start)
            "transitions": dev.transitions,  # since the watcher started, all kinds
            "last_change_ns": dev.last_change_ns,
        }


# --------------------------------------------------------------------------- the watcher


def _open_event_socket(netns_name: str | None, rcvbuf_bytes: int = RCVBUF_BYTES):
    """A netlink socket on the link group, bound in `netns_name` (this thread's own if None)."""
    from pyroute2 import IPRSocket  # select-able, unlike IPRoute whose socket asyncio owns

    def make():
        sock = IPRSocket(rcvbuf=rcvbuf_bytes)
        try:
            sock.bind(groups=RTMGRP_LINK)  # creates the socket: in this thread's namespace now
        except BaseException:
            sock.close()
            raise
        return sock

    if netns_name is None:
        return make()
    from clockfabric.lab import netns

    with netns.entered(netns_name):
        return make()


def _dump(netns_name: str | None) -> list[LinkInfo]:
    """Every link's state now, from one RTM_GETLINK dump on a socket of its own."""
    from pyroute2 import IPRoute

    if netns_name is None:
        ipr = IPRoute()
    else:
        from clockfabric.lab import netns

        ipr = netns.ipr(netns_name)
    with ipr:
        return [info for msg in ipr.get_links() if (info := parse_link(msg)) is not None]


class LinkWatcher:
    """Watch links by netlink events in a daemon thread; read transitions and flaps any time.

    `netns`: watch that named namespace (the thread steps in to open its sockets) instead of
    the one this process runs in. `start()` returns once the initial state is known, so a
    change made after it is seen; `stop()` wakes the thread through a pipe and joins it.
    If the kernel drops messages because the socket's queue (`rcvbuf_bytes`) overflowed, the
    watcher re-dumps and records what changed as transitions marked `resync`.
    """

    def __init__(self, devices: list[str] | None = None, *, flap_window_s: float = 60.0,
                 clock: Callable[[], int] = time.time_ns, netns: str | None = None,
                 max_events: int = EVENTS_MAX, rcvbuf_bytes: int = RCVBUF_BYTES,
                 on_change: Callable[[], None] | None = None):
        self.clock = clock
        self.on_change = on_change  # called from the watcher's thread after new transitions
        self.netns = netns
        self.rcvbuf_bytes = rcvbuf_bytes
        self.tracker = LinkTracker(devices, flap_window_s=flap_window_s, max_events=max_events)
        self.flap_window_s = flap_window_s
        self.messages = 0  # link messages read, state changes or not
        self.overruns = 0  # times the kernel dropped messages for us (ENOBUFS) and we re-dumped
        self.started_ns: int | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = -1, -1
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stopping = False

    # -- lifecycle

    def start(self, timeout_s: float = 10.0) -> LinkWatcher:
        if self._thread is not None:
            return self
        self._wake_r, self._wake_w = os.pipe()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="clockfabric-links", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            self.stop()
            raise TimeoutError(f"link watcher did not start within {timeout_s} s")
        if self._error is not None:
            error, self._error = self._error, None
            self.stop()
            raise error
        return self

    def stop(self, timeout_s: float = 1.0) -> bool:
        """Stop the thread; True if it ended within timeout_s."""
        thread = self._thread
        if thread is None:
            return True
        self._stopping = True
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        thread.join(timeout_s)
        if thread.is_alive():
            return False
        self._thread = None
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1
        self._ready.clear()
        return True

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the thread

    def _run(self) -> None:
        sock = None
        try:
            # Subscribe first, then dump: a change between the two is in the dump and then
            # arrives again as a message, which repeats the state and makes no transition.
            sock = _open_event_socket(self.netns, self.rcvbuf_bytes)
            infos = _dump(self.netns)
            with self._lock:
                self.tracker.seed(infos)
                self.started_ns = self.clock()
        except BaseException as e:  # noqa: BLE001 - handed to start(), which raises it
            self._error = e
            if sock is not None:
                sock.close()
            self._ready.set()
            return
        self._ready.set()
        raw = sock.socket  # recv on it directly: one read, one clock reading, no asyncio
        poller = select.poll()
        poller.register(raw.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        try:
            while not self._stopping:
                # the timeout is only a safety net: stop() wakes us through the pipe
                ready = {fd for fd, _ in poller.poll(1000)}
                if self._stopping or self._wake_r in ready:
                    break
                if raw.fileno() in ready:
                    self._drain(raw, sock.marshal)
        except Exception:  # log it; the thread ends, and `running` says so
            log.exception("link watcher stopped on an error")
        finally:
            sock.close()

    def _drain(self, raw, marshal) -> None:
        seq = self.tracker.seq
        try:
            self._read(raw, marshal)
        finally:
            if self.on_change is not None and self.tracker.seq != seq:
                self.on_change()

    def _read(self, raw, marshal) -> None:
        for _ in range(256):  # then back to poll, to look at the stop pipe
            try:
                data = raw.recv(RECV_BYTES, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
                self._resync(raw)
                continue
            # The kernel stamps no time on link notifications: this read is the event's time.
            t_ns = self.clock()
            for msg in marshal.parse(data):
                if (info := parse_link(msg)) is None:
                    continue
                with self._lock:
                    self.messages += 1
                    self.tracker.apply(info, t_ns)

    def _resync(self, raw) -> None:
        """The kernel dropped messages (our buffer overflowed): re-dump and diff."""
        self.overruns += 1
        log.warning("link watcher lost netlink messages; re-reading every link's state")
        while True:  # what is still queued is older than the dump to come: it would only replay the past
            try:
                raw.recv(RECV_BYTES, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
        infos = _dump(self.netns)
        with self._lock:
            self.tracker.resync(infos, self.clock())

    # -- reading (any thread)

    def events(self, since_ns: int | None = None, *, after_seq: int | None = None) -> list[Transition]:
        """Transitions still held (the newest EVENTS_MAX), oldest first: those at or after
        since_ns, and with seq above after_seq (use it to read each one exactly once)."""
        with self._lock:
            return self.tracker.since(since_ns, after_seq)

    @property
    def dropped(self) -> int:
        """Transitions pushed out of the bounded history."""
        return self.tracker.dropped

    def flaps(self, device: str) -> dict[str, Any]:
        with self._lock:
            return self.tracker.flaps(device, self.clock())

    def state(self, device: str) -> LinkState | None:
        with self._lock:
            return self.tracker.state(device)

    def snapshot(self) -> dict[str, Any]:
        """Everything at once: each device's state and flaps, and the watcher's counters."""
        now = self.clock()
        with self._lock:
            states = {name: st for name, st in self.tracker.states.values()}
            return {
                "devices": {
                    name: {"state": st.as_dict() if (st := states.get(name)) else None,
                           **self.tracker.flaps(name, now)}
                    for name in sorted(set(states) | set(self.tracker.devices))
                },
                "messages": self.messages, "overruns": self.overruns, "dropped": self.tracker.dropped,
                "transitions": self.tracker.seq,
            }


# --------------------------------------------------------------------------- the collector


class LinkCollector:
    """Link state and flaps as metrics, from a LinkWatcher (its own, started on first use,
    unless one is given)."""

    name = "links"

    def __init__(self, watcher: LinkWatcher | None = None, devices: list[str] | None = None, *,
                 flap_window_s: float = 60.0, netns: str | None = None):
        self.watcher = watcher
        self._own = watcher is None
        self._kw = {"flap_window_s": flap_window_s, "netns": netns}
        self.devices = devices

    def absent(self) -> str | None:
        if self.watcher is None:
            try:
                self.watcher = LinkWatcher(self.devices, **self._kw).start()
            except Exception as e:  # noqa: BLE001 - no netlink here: the collector is absent, not broken
                return f"cannot watch netlink link events: {e}"
        elif not self.watcher.running:
            try:
                self.watcher.start()
            except Exception as e:  # noqa: BLE001
                return f"cannot watch netlink link events: {e}"
        return None

    def close(self) -> None:
        if self._own and self.watcher is not None:
            self.watcher.stop()

    def collect(self) -> list[Metric]:
        w = self.watcher
        if w is None or not w.running:
            raise RuntimeError("link watcher is not running")
        snap = w.snapshot()
        out = []
        for device, d in snap["devices"].items():
            labels = {"device": device}
            if d["state"] is not None:
                out.append(Metric("clockfabric_link_up", float(d["state"]["up"]), labels,
                                  help="1 if the link is up (admin up, operstate up), from netlink"))
            out.append(Metric("clockfabric_link_transitions_total", float(d["transitions"]), labels, "counter",
                              "Link state changes seen by netlink events since the agent started"))
            if d["last_change_ns"] is not None:
                out.append(Metric("clockfabric_link_last_change_timestamp_seconds", d["last_change_ns"] / 1e9,
                                  labels, help="When the link's state last changed (Unix time, seconds)"))
            out.append(Metric("clockfabric_link_flaps_in_window", float(d["count"]), labels,
                              help=f"Downs and ups of the link in the last {d['window_s']:g} s"))
            if d["down_durations_s"]:
                out.append(Metric("clockfabric_link_last_down_duration_seconds", d["down_durations_s"][-1], labels,
                                  help="How long the link's last finished down period lasted"))
        out.append(Metric("clockfabric_link_events_dropped_total", float(snap["dropped"]), {}, "counter",
                          "Link transitions pushed out of the watcher's bounded history"))
        return out
