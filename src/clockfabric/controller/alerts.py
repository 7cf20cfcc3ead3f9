"""Alerts: findings in; alerts opened and resolved in storage, each with a log line and a webhook
(and, with `alertmanager`, a post in Alertmanager's webhook format: controller.alertmanager).

`AlertManager.sync` is called each tick with the detectors' active findings. A key that is
new opens an alert (storage de-duplicates by key); an open key no longer found resolves.

Webhooks are posted during `sync`, one JSON body per open or resolve, in order. A failed
post stays queued (bounded: the oldest go first when full) and is retried at the next sync;
a sync makes at most one failed attempt, so a dead receiver costs one timeout per tick.

The database may itself be what fails. A StorageError (from sync's own writes, or reported
by the caller through `raise_storage_alert`) becomes an in-memory alert, key "storage",
logged and posted like any other, whose detail names the fault met last (and every kind met
while it was open); storage's work is retried at later syncs, and once no error
has come for `storage_quiet_s` the storage alert is written to storage as history and resolved.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import TYPE_CHECKING

import httpx

from clockfabric.controller.detectors import Finding
from clockfabric.controller.storage.base import Alert, Storage, StorageError
from clockfabric.errors import ClockfabricError

if TYPE_CHECKING:  # alertmanager imports this module
    from clockfabric.controller.alertmanager import AlertmanagerWebhook

DEFAULT_LOG = logging.getLogger(__name__)
STORAGE_KEY = "storage"
WEBHOOK_QUEUE_MAX = 1000
PAGE = 500

Change = tuple[str, Alert]  # ("opened" | "resolved", the alert)


class AlertManager:
    def __init__(self, storage: Storage, *, webhook_url: str | None = None,
                 log: logging.Logger = DEFAULT_LOG,
                 clock: Callable[[], int] = time.time_ns, webhook_timeout_s: float = 2.0,
                 storage_quiet_s: float = 10.0, alertmanager: AlertmanagerWebhook | None = None):
        """`alertmanager`: also send each change, in Alertmanager's webhook format, from its own thread."""
        if webhook_url:
            check_url(webhook_url)
        self.storage = storage
        self.webhook_url = webhook_url
        self.alertmanager = alertmanager
        self.log = log
        self.clock = clock
        self.storage_quiet_ns = round(storage_quiet_s * 1e9)
        self._client = httpx.Client(timeout=webhook_timeout_s) if webhook_url else None
        self._outbox: deque[dict] = deque(maxlen=WEBHOOK_QUEUE_MAX)
        # the state below is shared with raise_storage_alert, called from the caller's request threads;
        # the lock is never held across a webhook post, so those threads never wait on the network
        self._lock = threading.Lock()
        self._open: dict[str, Alert] | None = None  # open in storage, by key; None until read from it
        self.storage_alert: Alert | None = None  # in memory only while storage fails: show it beside storage's
        self._storage_error_ns = 0
        self._wrote_since_error = False  # a push's rows stored since storage last failed
        # counters, for the controller's metrics
        self.webhook_sent = 0
        self.webhook_failures = 0
        self.webhook_dropped = 0
        self.storage_failures = 0
        self.storage_errors: Counter[str] = Counter()  # by StorageError.kind

    @property
    def webhook_pending(self) -> int:
        return len(self._outbox)

    def sync(self, findings: dict[str, Finding], now_ns: int) -> list[Change]:
        """Open what is new, resolve what is gone; returns the changes made, in order.
        Call it from one task at a time (the controller's tick)."""
        changes: list[Change] = []
        with self._lock:
            try:
                self._sync_storage(findings, now_ns, changes)
                self._recover(now_ns, changes)
            except StorageError as e:  # what was not done is tried again next sync
                self._storage_failed(e, now_ns, changes)
        self._deliver()
        return changes

    def raise_storage_alert(self, error: Exception, now_ns: int | None = None) -> Alert | None:
        """Storage failed the caller (a push it could not store): the alert if this opened it.
        Its webhook goes out at the next sync, so this never waits on the network."""
        changes: list[Change] = []
        with self._lock:
            self._storage_failed(error, self.clock() if now_ns is None else now_ns, changes)
        return changes[0][1] if changes else None

    def storage_wrote(self, now_ns: int) -> None:
        """Real data (a push's rows) was stored: the storage alert may resolve once quiet. The
        storage check's probe does not count: a probe row can pass where pushes still fail."""
        with self._lock:
            self._wrote_since_error = True

    def open_by_kind(self) -> dict[str, int]:
        """Open alerts per kind, as this manager knows them (the storage alert too): for metrics,
        without a database read."""
        with self._lock:
            kinds = Counter(a.kind for a in (self._open or {}).values())
            if self.storage_alert:
                kinds[self.storage_alert.kind] += 1
        return dict(kinds)

    def close(self) -> None:
        if self._client:
            self._client.close()
        if self.alertmanager:
            self.alertmanager.close()

    # ---- storage ---------------------------------------------------------------------------
    def _sync_storage(self, findings: dict[str, Finding], now_ns: int, changes: list[Change]) -> None:
        if self._open is None:  # after a restart, storage knows what is open
            self._open = self._read_open()
        for key, f in findings.items():
            if key in self._open or key == STORAGE_KEY:
                continue
            alert = Alert(key=key, kind=f.kind, severity=f.severity, message=f.message, opened_ns=now_ns,
                          detail=f.detail)
            stored = self.storage.open_alert(alert)
            self._open[key] = stored or alert  # None: open already (another writer, an earlier run)
            if stored:
                self._notify("opened", stored, changes)
        for key in [k for k in self._open if k not in findings]:
            resolved = self.storage.resolve_alert(key, now_ns)
            del self._open[key]
            if resolved:  # None: someone closed it already
                self._notify("resolved", resolved, changes)

    def _read_open(self) -> dict[str, Alert]:
        found: dict[str, Alert] = {}
        after = 0
        while True:
            page = self.storage.alerts(open_only=True, after_id=after, limit=PAGE)
            found.update((a.key, a) for a in page if a.key != STORAGE_KEY)
            if len(page) < PAGE:
                return found
            last = page[-1].id
            assert last is not None  # stored rows have ids
            after = last

    def _storage_failed(self, error: Exception, now_ns: int, changes: list[Change]) -> None:
        self.storage_failures += 1
        self.storage_errors[getattr(error, "kind", "unavailable")] += 1
        self._storage_error_ns = now_ns
        self._wrote_since_error = False
        fault = getattr(error, "kind", "unavailable")
        held = self.storage_alert
        if held and held.detail.get("fault") == fault:
            self.storage_alert = replace(held, detail={**held.detail, "failures": self.storage_failures})
            return
        # a fault of another kind while the alert is open (a deletion just after a lock) is a fault of its
        # own: the open alert names it now, or the API would go on showing only the first
        faults = [*held.detail.get("faults", []), fault] if held else [fault]
        self.storage_alert = Alert(
            key=STORAGE_KEY, kind="storage", severity="critical", opened_ns=held.opened_ns if held else now_ns,
            message=f"storage is failing: {error}; alerts are kept in memory until it recovers",
            detail={"error": str(error), "error_type": type(error).__name__, "fault": fault,
                    "faults": faults, "failures": self.storage_failures, "fault_ns": now_ns})
        if held:
            self.log.error("alert storage: now %s (%s)", fault, error)
        else:
            self._notify("opened", self.storage_alert, changes)

    def _recover(self, now_ns: int, changes: list[Change]) -> None:
        """Storage did its work this sync, and a push was stored since it last failed; after a quiet
        spell, close the storage alert, in storage too."""
        quiet = now_ns - self._storage_error_ns >= self.storage_quiet_ns
        if not self.storage_alert or not self._wrote_since_error or not quiet:
            return
        self.storage.open_alert(self.storage_alert)
        resolved = self.storage.resolve_alert(STORAGE_KEY, now_ns) or replace(self.storage_alert, resolved_ns=now_ns)
        self.storage_alert = None
        self._notify("resolved", resolved, changes)

    # ---- log and webhook ---------------------------------------------------------------------
    def _notify(self, action: str, alert: Alert, changes: list[Change]) -> None:
        changes.append((action, alert))
        level = logging.INFO if action == "resolved" else (
            logging.ERROR if alert.severity == "critical" else logging.WARNING)
        self.log.log(level, "alert %s: %s [%s] %s", action, alert.key, alert.severity, alert.message)
        if self.alertmanager:
            self.alertmanager.send(action, alert)  # queued: its thread posts it
        if self._client:
            if len(self._outbox) == self._outbox.maxlen:
                self.webhook_dropped += 1  # the deque drops the oldest
            self._outbox.append({"action": action, "alert": asdict(alert)})

    def _deliver(self) -> None:
        client, url = self._client, self.webhook_url
        if client is None or url is None:  # no webhook: nothing is ever queued
            return
        while True:
            with self._lock:
                if not self._outbox:
                    return
                item = self._outbox[0]
            body = json.dumps(item, default=str)  # default: an odd detail value must never stop delivery
            try:
                r = client.post(url, content=body, headers={"content-type": "application/json"})
            except httpx.HTTPError as e:
                return self._webhook_failed(f"{type(e).__name__}: {e}")
            if r.status_code >= 500 or r.status_code in (408, 429):  # the receiver may take it later
                return self._webhook_failed(f"HTTP {r.status_code}")
            with self._lock:
                if self._outbox and self._outbox[0] is item:  # not pushed out by a full queue meanwhile
                    self._outbox.popleft()
                if r.is_success:
                    self.webhook_sent += 1
                    continue
                self.webhook_failures += 1  # 4xx: it refuses this body, and always will
                self.webhook_dropped += 1
            self.log.warning("alert webhook %s refused an alert (HTTP %d); dropped it", self.webhook_url,
                             r.status_code)

    def _webhook_failed(self, why: str) -> None:
        with self._lock:
            self.webhook_failures += 1
        self.log.warning("alert webhook %s failed (%s); %d queued for the next sync", self.webhook_url, why,
                         len(self._outbox))


def check_url(url: str, what: str = "webhook URL") -> None:
    """One clear line unless `url` is an http(s) URL with a host; `what` names it (a flag)."""
    try:
        ok = httpx.URL(url).scheme in ("http", "https") and bool(httpx.URL(url).host)
    except httpx.InvalidURL:
        ok = False
    if not ok:
        raise ClockfabricError(f"{what} {url!r} is not an http:// or https:// URL with a host; fix it")
