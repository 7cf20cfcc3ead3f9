"""Alerts to Alertmanager through its API v2 (`POST /api/v2/alerts`); Alertmanager does the rest:
grouping, silences, inhibition, and delivery to receivers (docs/alerts.md).

Each alert is posted with stable labels: `alertname` (`Clockfabric` + its kind in CamelCase),
`severity`, `key` (the alert's identity while it lasts) and whichever identity labels it has
(link, direction, host, device, port, src, dst, path, jobid, flow, url); never a time or a
count, so Alertmanager sees one alert from its first post to its last. A firing alert carries
its `startsAt` and no `endsAt` (Alertmanager holds it for its resolve_timeout, 5 minutes by
default) and is posted again every `resend_s` while open, so it never expires while it fires
and an Alertmanager that restarted learns it again; a resolved one is posted with its `endsAt`.

Several URLs (an HA pair): each gets every alert, and the pair's own gossip sends one
notification. Posts go from their own thread, so no tick waits on the network. Each
Alertmanager has its own queue of the newest state of each alert it has not taken (a resolve
replaces its firing), bounded at `queue_max` alerts: when full, the oldest goes and is counted
as dropped. While one is away its queue waits, tried again after a doubling wait; when it
answers, the queue goes in posts of up to BATCH alerts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import httpx

from clockfabric.controller.storage.base import Alert
from clockfabric.errors import ClockfabricError

log = logging.getLogger(__name__)
QUEUE_MAX = 1000
BATCH = 500
RESEND_S = 60.0  # well under Alertmanager's default resolve_timeout (5m)
IDENTITY = ("link", "direction", "host", "device", "port", "src", "dst", "path", "jobid", "flow", "url")
ALERTNAMES = {"flapping": "ClockfabricLinkFlapping"}  # where the kind alone reads badly
LINK_KINDS = ("link_down", "flapping")  # their key names the link, in the topology or not


def alertname(kind: str) -> str:
    return ALERTNAMES.get(kind) or "Clockfabric" + "".join(w.capitalize() for w in kind.split("_"))


def alert_labels(alert: Alert) -> dict[str, str]:
    labels = {"alertname": alertname(alert.kind), "severity": alert.severity, "key": alert.key}
    detail = dict(alert.detail)
    links = detail.get("links")
    if isinstance(links, list) and len(links) == 1 and isinstance(links[0], dict):  # congestion on one link
        detail.update(links[0])
    if alert.kind in LINK_KINDS and not detail.get("link"):
        detail["link"] = alert.key.partition(":")[2]  # node:iface where the topology has no link
    for name in IDENTITY:
        value = detail.get(name)
        if isinstance(value, str | int) and not isinstance(value, bool) and value != "":
            labels[name] = str(value)
    return labels


def posted(action: str, alert: Alert, generator_url: str, now_ns: int) -> dict:
    """One alert as API v2 takes it (a PostableAlert)."""
    body = {"labels": alert_labels(alert), "annotations": {"summary": alert.message},
            "startsAt": rfc3339(alert.opened_ns), "generatorURL": generator_url}
    if action == "resolved":
        body["endsAt"] = rfc3339(alert.resolved_ns or now_ns)
    return body


def rfc3339(t_ns: int) -> str:
    seconds, ns = divmod(t_ns, 10**9)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{ns // 1000:06d}Z"


def check_url(url: str, what: str = "--alertmanager") -> None:
    """One clear line unless `url` is an http(s) URL with a host; `what` names it (a flag)."""
    try:
        ok = httpx.URL(url).scheme in ("http", "https") and bool(httpx.URL(url).host)
    except httpx.InvalidURL:
        ok = False
    if not ok:
        raise ClockfabricError(f"{what} {url!r} is not an http:// or https:// URL with a host; fix it")


@dataclass
class Target:
    """One Alertmanager and what it has not taken yet."""

    url: str
    queue: OrderedDict[str, dict] = field(default_factory=OrderedDict)  # alert key -> newest body
    up: bool | None = None  # None until first tried
    error: str = ""
    wait_s: float = 0.0
    retry_at: float = 0.0  # monotonic


class AlertmanagerClient:
    def __init__(self, urls: list[str], *, generator_url: str = "http://localhost/", resend_s: float = RESEND_S,
                 queue_max: int = QUEUE_MAX, timeout_s: float = 2.0, first_wait_s: float = 0.5,
                 max_wait_s: float = 10.0):
        for url in urls:
            check_url(url)
        self.targets = [Target(url.rstrip("/")) for url in urls]
        self.generator_url = generator_url
        self.resend_s = resend_s
        self.queue_max = queue_max
        self.first_wait_s, self.max_wait_s = first_wait_s, max_wait_s
        self._client = httpx.Client(timeout=timeout_s)
        self._firing: dict[str, dict] = {}  # what is re-posted every resend_s
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        # counters, for the controller's metrics
        self.sent = 0  # alerts an Alertmanager took
        self.failures = 0  # posts that failed
        self.dropped = 0  # alerts given up: pushed out of a full queue, or refused
        self._thread = threading.Thread(target=self._run, name="alertmanager", daemon=True)
        self._thread.start()

    @property
    def urls(self) -> list[str]:
        return [t.url for t in self.targets]

    @property
    def pending(self) -> int:
        with self._lock:
            return sum(len(t.queue) for t in self.targets)

    def away(self) -> dict[str, str]:
        """The Alertmanagers whose last post failed, with why and what waits for them."""
        with self._lock:
            return {t.url: f"{t.error}; {len(t.queue)} alerts queued" for t in self.targets if t.up is False}

    def up(self) -> dict[str, bool]:
        with self._lock:
            return {t.url: t.up is not False for t in self.targets}

    def send(self, action: str, alert: Alert) -> None:
        """Queue one change (opened or resolved) for every Alertmanager; never waits on the network."""
        body = posted(action, alert, self.generator_url, time.time_ns())
        with self._lock:
            if action == "resolved":
                self._firing.pop(alert.key, None)
            else:
                self._firing[alert.key] = body
            for t in self.targets:
                self._queue(t, alert.key, body)
        self._wake.set()

    def close(self, timeout_s: float = 2.0) -> None:
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout_s)
        self._client.close()

    def _queue(self, t: Target, key: str, body: dict) -> None:
        if key in t.queue:
            del t.queue[key]  # the newer state goes to the back
        elif len(t.queue) >= self.queue_max:
            t.queue.popitem(last=False)
            self.dropped += 1
        t.queue[key] = body

    def _run(self) -> None:
        resend_at = time.monotonic() + self.resend_s
        while not self._stopping.is_set():
            self._wake.clear()
            now = time.monotonic()
            if now >= resend_at:
                with self._lock:
                    for key, body in self._firing.items():
                        for t in self.targets:
                            self._queue(t, key, body)
                resend_at = now + self.resend_s
            for t in self.targets:
                if t.queue and now >= t.retry_at:
                    self._flush(t)
            with self._lock:
                due = [resend_at, *(t.retry_at for t in self.targets if t.queue)]
            self._wake.wait(max(0.01, min(due) - time.monotonic()))

    def _flush(self, t: Target) -> None:
        while not self._stopping.is_set():
            with self._lock:
                batch = list(t.queue.items())[:BATCH]
            if not batch:
                return
            why = self._post(t.url, [body for _, body in batch])
            with self._lock:
                if why is None or why.startswith("refused"):
                    for key, body in batch:
                        if t.queue.get(key) is body:  # not replaced by a newer state meanwhile
                            del t.queue[key]
                if why is None:
                    self.sent += len(batch)
                    if t.up is False:
                        log.warning("alertmanager %s takes alerts again", t.url)
                    t.up, t.error, t.wait_s = True, "", 0.0
                    continue
                self.failures += 1
                if why.startswith("refused"):
                    self.dropped += len(batch)
                    log.error("alertmanager %s %s; dropped %d alerts", t.url, why, len(batch))
                    return
                if t.up is not False:
                    log.error("alertmanager %s does not take alerts (%s); queueing them", t.url, why)
                t.up, t.error = False, why
                t.wait_s = min(self.max_wait_s, t.wait_s * 2 or self.first_wait_s)
                t.retry_at = time.monotonic() + t.wait_s
                return

    def _post(self, url: str, alerts: list[dict]) -> str | None:
        """None once taken; else why not ("refused ..." for a body it will never take)."""
        try:
            r = self._client.post(f"{url}/api/v2/alerts", json=alerts)
        except httpx.HTTPError as e:
            return f"{type(e).__name__}: {e}"
        if r.is_success:
            return None
        if r.status_code >= 500 or r.status_code in (404, 408, 429):  # 404: not (yet) an Alertmanager there
            return f"HTTP {r.status_code}"
        return f"refused: HTTP {r.status_code} {r.text.strip()[:200]}"
