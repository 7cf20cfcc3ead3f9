"""Link state and flaps from netlink events, as they happen (no polling).

`LinkWatcher` listens on the rtnetlink link group (RTMGRP_LINK) of the namespace it runs
in (or of a named one), seeds each link's state with one dump, and turns every RTM_NEWLINK /
RTM_DELLINK that really changes a link's state into a `Transition` (link_state.py) stamped
the moment the message was read.

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
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

if sys.version_info >= (3, 11):
    from typing import Self
else:
    from typing_extensions import Self

from clockfabric.telemetry.link_state import EVENTS_MAX, LinkInfo, LinkState, LinkTracker, Transition, parse_link

log = logging.getLogger(__name__)

RTMGRP_LINK = 0x1  # rtnetlink multicast group of link notifications (linux/rtnetlink.h)
RECV_BYTES = 1 << 16
RCVBUF_BYTES = 1 << 20  # kernel-side queue; on overflow (ENOBUFS) the watcher re-dumps


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
    from clockfabric import netns

    with netns.entered(netns_name):
        return make()


def _dump(netns_name: str | None) -> list[LinkInfo]:
    """Every link's state now, from one RTM_GETLINK dump on a socket of its own."""
    from pyroute2 import IPRoute

    if netns_name is None:
        ipr = IPRoute()
    else:
        from clockfabric import netns

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

    def start(self, timeout_s: float = 10.0) -> Self:
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
