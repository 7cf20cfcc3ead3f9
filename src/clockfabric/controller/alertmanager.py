"""Alerts to a webhook in Alertmanager's webhook format (`--alert-webhook URL`), so a receiver
written for Prometheus' Alertmanager (PagerDuty and Slack bridges, alert routers) takes the
controller's alerts as they are.

Each change (an alert opened or resolved) is one POST of Alertmanager's webhook payload,
version "4": one alert in `alerts`, `status` firing or resolved, the group keyed by the alert's
name and key, so a receiver pairs a resolve with its firing. Labels: `alertname`
(`Clockfabric` + the kind in CamelCase, as the Prometheus rules name theirs), `severity`,
`key`, and the alert's host, device, src, dst and path where it has them; the message is the
`summary` annotation; the fingerprint is Alertmanager's (FNV-1a 64 over the sorted labels).

Posts go out from their own thread: `send` only queues, so no tick or push ever waits on the
receiver. A post that fails for now (a connection error, a timeout, 5xx, 408, 429) is tried
again after a doubling wait, up to `attempts` times, then dropped and counted; one the
receiver refuses (any other 4xx) is dropped at once. The queue is bounded: when full, the
oldest goes first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

import httpx

from clockfabric.controller.alerts import check_url
from clockfabric.controller.storage.base import Alert

log = logging.getLogger(__name__)
QUEUE_MAX = 1000
NEVER = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt for an alert still firing
DETAIL_LABELS = ("host", "device", "src", "dst", "path")
_FNV_OFFSET, _FNV_PRIME, _SEPARATOR = 0xcbf29ce484222325, 0x100000001b3, 0xff


def alert_labels(alert: Alert) -> dict[str, str]:
    labels = {"alertname": "Clockfabric" + "".join(w.capitalize() for w in alert.kind.split("_")),
              "severity": alert.severity, "key": alert.key}
    for name in DETAIL_LABELS:
        value = alert.detail.get(name)
        if isinstance(value, str | int) and not isinstance(value, bool) and value != "":
            labels[name] = str(value)
    return labels


def fingerprint(labels: dict[str, str]) -> str:
    """Alertmanager's label set fingerprint: FNV-1a 64 over name, 0xff, value, 0xff, names sorted."""
    h = _FNV_OFFSET
    for name in sorted(labels):
        for part in (name, labels[name]):
            for byte in (*part.encode(), _SEPARATOR):
                h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def payload(action: str, alert: Alert, *, receiver: str = "clockfabric", external_url: str = "") -> dict:
    """Alertmanager's webhook body (version 4) for one opened or resolved alert."""
    status = "resolved" if action == "resolved" else "firing"
    labels = alert_labels(alert)
    group = {"alertname": labels["alertname"], "key": labels["key"]}
    annotations = {"summary": alert.message}
    return {
        "version": "4",
        "groupKey": "{}:{" + ", ".join(f'{k}="{_quoted(v)}"' for k, v in sorted(group.items())) + "}",
        "truncatedAlerts": 0,
        "status": status,
        "receiver": receiver,
        "groupLabels": group,
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": external_url,
        "alerts": [{
            "status": status,
            "labels": labels,
            "annotations": annotations,
            "startsAt": rfc3339(alert.opened_ns),
            "endsAt": rfc3339(alert.resolved_ns) if status == "resolved" and alert.resolved_ns else NEVER,
            "generatorURL": external_url,
            "fingerprint": fingerprint(labels),
        }],
    }


def rfc3339(t_ns: int) -> str:
    seconds, ns = divmod(t_ns, 10**9)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{ns // 1000:06d}Z"


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


class AlertmanagerWebhook:
    def __init__(self, url: str, *, external_url: str = "", attempts: int = 5, first_wait_s: float = 0.5,
                 max_wait_s: float = 8.0, timeout_s: float = 2.0):
        check_url(url, "--alert-webhook")
        self.url = url
        self.external_url = external_url
        self.attempts = attempts
        self.first_wait_s = first_wait_s
        self.max_wait_s = max_wait_s
        self._client = httpx.Client(timeout=timeout_s)
        self._queue: deque[dict] = deque(maxlen=QUEUE_MAX)
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._stopping = threading.Event()
        # counters, for the controller's metrics
        self.sent = 0
        self.failures = 0  # posts that failed, retried or not
        self.dropped = 0  # notifications given up: refused, out of attempts, pushed out of a full queue
        self._thread = threading.Thread(target=self._run, name="alertmanager-webhook", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        return len(self._queue)

    def send(self, action: str, alert: Alert) -> None:
        """Queue one change; never waits on the network."""
        body = payload(action, alert, external_url=self.external_url)
        with self._lock:
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1  # the deque drops the oldest
            self._queue.append(body)
        self._ready.set()

    def close(self, timeout_s: float = 2.0) -> None:
        self._stopping.set()
        self._ready.set()
        self._thread.join(timeout_s)
        self._client.close()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._ready.wait()
            with self._lock:
                if not self._queue:
                    self._ready.clear()
                    continue
                body = self._queue.popleft()
            self._deliver(body)

    def _deliver(self, body: dict) -> None:
        wait_s = self.first_wait_s
        for attempt in range(1, self.attempts + 1):
            why = self._post(body)
            if why is None:
                return
            with self._lock:
                self.failures += 1
            if why.startswith("refused") or attempt == self.attempts:
                break
            if self._stopping.wait(wait_s):
                break
            wait_s = min(self.max_wait_s, wait_s * 2)
        with self._lock:
            self.dropped += 1
        log.warning("alertmanager webhook %s: gave up on %s %s (%s)", self.url, body["status"],
                    body["groupKey"], why, extra={"url": self.url, "status": body["status"]})

    def _post(self, body: dict) -> str | None:
        """None once delivered; else why not ("refused ..." for good)."""
        try:
            r = self._client.post(self.url, json=body)
        except httpx.HTTPError as e:
            return f"{type(e).__name__}: {e}"
        if r.is_success:
            with self._lock:
                self.sent += 1
            return None
        if r.status_code >= 500 or r.status_code in (408, 429):
            return f"HTTP {r.status_code}"
        return f"refused: HTTP {r.status_code}"

