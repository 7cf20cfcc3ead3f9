"""Agent -> controller: events and summaries over HTTP, buffered while the controller is away.

One thread. It pushes once per `interval_s`, and at once when woken (a link went down: the
controller should know within a second). Events wait in a bounded buffer until the
controller has taken them; if the buffer fills while the controller is away, the oldest go
first and the next push says how many were dropped. Samples are only the latest summary:
a summary the controller missed is replaced by a newer one, not replayed.
"""

from __future__ import annotations

import logging
import ssl
import threading
import uuid
from collections import deque
from collections.abc import Callable
from itertools import islice

import httpx

from clockfabric.errors import ClockfabricError

log = logging.getLogger(__name__)
logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per push
BUFFER_EVENTS = 10_000
PUSH_EVENTS = 2_000  # per request; more go in the next one, at once
MAX_BACKOFF_S = 10.0


class Pusher(threading.Thread):
    def __init__(self, url: str, token: str, host: str, *, snapshot: Callable[[], tuple[list[dict], list[dict], dict]],
                 interval_s: float = 1.0, buffer_events: int = BUFFER_EVENTS,
                 verify: str | bool | ssl.SSLContext = True,
                 paths: Callable[[], list] | None = None):
        """`snapshot()` returns (new events, current samples, agent info); events are taken from
        the caller's sources exactly once, so they must be kept here until the controller has them.
        `paths()`: the host's path map (agent.pathmap rows), sent whole with every push."""
        super().__init__(name="controller-push", daemon=True)
        self.url = url.rstrip("/") + "/api/v1/push"
        self.host = host
        self.snapshot = snapshot
        self.paths = paths
        self.interval_s = interval_s
        self.boot = uuid.uuid4().hex[:12]  # this agent run: (host, boot, seq) names an event for good
        self.seq = 0
        self.pending: deque[dict] = deque(maxlen=buffer_events)
        self.counters = {"pushes": 0, "push_failures": 0, "events_sent": 0, "events_dropped": 0}
        self._unreported_drops = 0
        self._wake = threading.Event()
        self._stopping = threading.Event()
        if isinstance(verify, str):  # a private CA's file: httpx wants it as an SSL context
            try:
                verify = ssl.create_default_context(cafile=verify)
            except (OSError, ssl.SSLError) as e:
                raise ClockfabricError(f"cannot read the CA file {verify}: {e.strerror or e}; "
                                       "give the PEM file of the CA that signed the controller's certificate") from None
        self._client = httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=5.0, verify=verify)

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def add_events(self, events: list[dict]) -> None:
        for e in events:
            self.seq += 1
            if len(self.pending) == self.pending.maxlen:
                self.counters["events_dropped"] += 1
                self._unreported_drops += 1
            self.pending.append({"seq": self.seq, **e})

    def run(self) -> None:
        backoff = self.interval_s
        try:
            while not self._stopping.is_set():
                self._wake.wait(backoff)
                self._wake.clear()
                if self.push_once():
                    backoff = self.interval_s
                else:
                    backoff = min(MAX_BACKOFF_S, backoff * 2)
            self.push_once()  # a last one: what happened just before we stopped
        finally:
            self._client.close()

    def push_once(self) -> bool:
        events, samples, info = self.snapshot()
        self.add_events(events)
        batch = list(islice(self.pending, PUSH_EVENTS))
        body = {"host": self.host, "boot": self.boot, "info": info, "events": batch, "samples": samples,
                "dropped_events": self._unreported_drops}
        if self.paths:
            body["paths"] = self.paths()
        try:
            r = self._client.post(self.url, json=body)
        except httpx.HTTPError as e:
            return self._failed(f"{type(e).__name__}: {e}")
        if r.status_code != 200:
            return self._failed(f"HTTP {r.status_code}: {r.text[:200]}")
        for _ in batch:  # taken: forget them (new ones may have been added behind)
            self.pending.popleft()
        self._unreported_drops = 0
        if self.pending:
            self._wake.set()
        self.counters["pushes"] += 1
        self.counters["events_sent"] += len(batch)
        return True

    def _failed(self, why: str) -> bool:
        self.counters["push_failures"] += 1
        if self.counters["push_failures"] in (1, 10) or self.counters["push_failures"] % 100 == 0:
            log.warning("push to %s failed (%d so far, %d events held): %s", self.url,
                        self.counters["push_failures"], len(self.pending), why)
        return False


def link_payload(watcher, after_seq: int,
                 to_time: Callable[[int], tuple[int, bool]]) -> tuple[list[dict], list[dict], int]:
    """A LinkWatcher's news for the controller: transitions after `after_seq` as events (their
    time through `to_time`: real ns -> (ns to report, synced?)), every link's state as samples,
    and the last seq taken."""
    events = []
    for tr in watcher.events(after_seq=after_seq):
        after_seq = tr.seq
        t_ns, synced = to_time(tr.t_ns)
        events.append({"t_ns": t_ns, "synced": synced, "kind": f"link_{tr.kind}", "device": tr.device,
                       "detail": {"carrier_changes": tr.carrier_changes, "resync": tr.resync}})
    samples = []
    for device, d in watcher.snapshot()["devices"].items():
        if d["state"] is not None:
            samples.append({"name": "link_up", "value": float(d["state"]["up"]), "labels": {"device": device}})
        samples.append({"name": "link_transitions_total", "value": float(d["transitions"]),
                        "labels": {"device": device}})
    return events, samples, after_seq


def neighbour_samples(heard: dict[str, str | None]) -> list[dict]:
    """Each interface's LLDP neighbour ("" where none is heard: that withdraws an earlier one)."""
    return [{"name": "lldp_neighbour", "value": float(bool(seen)),
             "labels": {"device": device, "neighbour": seen or ""}}
            for device, seen in heard.items()]
