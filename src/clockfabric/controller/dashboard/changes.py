"""What changed in the controller since a page last looked, by topic, for the live stream.

`Changes.poll` looks at storage at most once per `every_s`, whoever asks, and bumps a topic's
version when its mark moved: "hosts" (a push arrived, a host went stale or came back),
"events" (new events stored), "alerts" (one opened or resolved), "audits" (a report posted).
Watching storage rather than hooking each writer catches every way state changes, and costs
a few small queries a second while someone is watching.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable

from clockfabric.controller.fleet import Fleet

TOPICS = ("hosts", "events", "alerts", "audits")
EVENT_LOOKBACK_NS = 60 * 10**9  # bounds the scan for new events: newer ones than any the page has seen
PAGE = 1000


class Changes:
    def __init__(self, fleet: Fleet, every_s: float = 0.25):
        self.fleet = fleet
        self.every_s = every_s
        self.versions = dict.fromkeys(TOPICS, 0)
        self._marks: dict[str, Hashable] = {}
        self._last_event_id = 0
        self._last_audit_id = 0
        self._checked = float("-inf")
        self._lock = threading.Lock()

    def poll(self) -> dict[str, int]:
        """Each topic's version now (blocking: storage is read; call it from a worker thread)."""
        with self._lock:
            if time.monotonic() - self._checked >= self.every_s:
                self._checked = time.monotonic()
                marks = self._marks_now()
                for topic, mark in marks.items():
                    if self._marks.get(topic, mark) != mark:
                        self.versions[topic] += 1
                self._marks = marks
            return dict(self.versions)

    def _marks_now(self) -> dict[str, Hashable]:
        storage = self.fleet.storage
        hosts = tuple((h["host"], h["state"], h["last_seen_ns"]) for h in self.fleet.host_rows())
        since = self.fleet.clock() - EVENT_LOOKBACK_NS
        while page := storage.events(since_ns=since, after_id=self._last_event_id, limit=PAGE):
            self._last_event_id = page[-1].id or self._last_event_id
            if len(page) < PAGE:
                break
        while audits := storage.audits(after_id=self._last_audit_id, limit=PAGE):
            self._last_audit_id = audits[-1].id or self._last_audit_id
            if len(audits) < PAGE:
                break
        open_alerts = tuple(a.id for a in storage.alerts(open_only=True, limit=PAGE))
        return {"hosts": hosts, "events": self._last_event_id, "alerts": open_alerts, "audits": self._last_audit_id}


def message(event: str, data: dict) -> str:
    """One server-sent event."""
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


async def stream(poll: Callable[[], Awaitable[dict[str, int]]], disconnected: Callable[[], Awaitable[bool]], *,
                 every_s: float = 0.25, keepalive_s: float = 15.0) -> AsyncIterator[str]:
    """Server-sent events: "hello" with the versions, then "change" with the topics that moved,
    at most one message per `every_s` (the debounce); a comment now and then keeps proxies open."""
    seen = await poll()
    yield "retry: 1000\n" + message("hello", {"topics": list(TOPICS), "versions": seen})
    quiet_since = time.monotonic()
    while not await disconnected():
        await asyncio.sleep(every_s)
        now = await poll()
        moved = [t for t in TOPICS if now[t] != seen[t]]
        if moved:
            seen = now
            quiet_since = time.monotonic()
            yield message("change", {"topics": moved, "versions": now})
        elif time.monotonic() - quiet_since > keepalive_s:
            quiet_since = time.monotonic()
            yield ": keep-alive\n\n"
