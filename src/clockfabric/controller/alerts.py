"""Alerts: findings in; alerts opened and resolved in storage, each with a log line and a post to
Alertmanager (controller.alertmanager), which groups, silences, inhibits and delivers them.

`AlertManager.sync` is called each tick with the detectors' active findings. A key that is
new opens an alert (storage de-duplicates by key); an open key no longer found resolves.
Posting to Alertmanager only queues: its own thread sends, so a sync never waits on it.

The database may itself be what fails. A StorageError (from sync's own writes, or reported
by the caller through `raise_storage_alert`) becomes an in-memory alert, key "storage",
logged and posted like any other, whose detail names the fault met last (and every kind met
while it was open); storage's work is retried at later syncs, and once no error
has come for `storage_quiet_s` the storage alert is written to storage as history and resolved.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from clockfabric.controller.alertmanager import AlertmanagerClient
from clockfabric.controller.detectors import Finding
from clockfabric.controller.storage.base import Alert, Storage, StorageError

DEFAULT_LOG = logging.getLogger(__name__)
STORAGE_KEY = "storage"
PAGE = 500

Change = tuple[str, Alert]  # ("opened" | "resolved", the alert)


class AlertManager:
    def __init__(self, storage: Storage, *, alertmanager: AlertmanagerClient | None = None,
                 log: logging.Logger = DEFAULT_LOG, clock: Callable[[], int] = time.time_ns,
                 storage_quiet_s: float = 10.0):
        """`alertmanager`: where each change is posted (None: storage and the log only)."""
        self.storage = storage
        self.alertmanager = alertmanager
        self.log = log
        self.clock = clock
        self.storage_quiet_ns = round(storage_quiet_s * 1e9)
        # the state below is shared with raise_storage_alert, called from the caller's request threads
        self._lock = threading.Lock()
        self._open: dict[str, Alert] | None = None  # open in storage, by key; None until read from it
        self.storage_alert: Alert | None = None  # in memory only while storage fails: show it beside storage's
        self._storage_error_ns = 0
        self._wrote_since_error = False  # a push's rows stored since storage last failed
        # counters, for the controller's metrics
        self.storage_failures = 0
        self.storage_errors: Counter[str] = Counter()  # by StorageError.kind

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
        return changes

    def raise_storage_alert(self, error: Exception, now_ns: int | None = None) -> Alert | None:
        """Storage failed the caller (a push it could not store): the alert if this opened it.
        Its post to Alertmanager is queued, so this never waits on the network."""
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
        if self.alertmanager:
            self.alertmanager.close()

    # ---- storage ---------------------------------------------------------------------------
    def _sync_storage(self, findings: dict[str, Finding], now_ns: int, changes: list[Change]) -> None:
        if self._open is None:  # after a restart, storage knows what is open
            self._open = self._read_open()
            if self.alertmanager:  # still firing: Alertmanager hears it again, or expires it at its resolve_timeout
                for alert in self._open.values():
                    self.alertmanager.send("opened", alert)
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

    # ---- log and Alertmanager ----------------------------------------------------------------
    def _notify(self, action: str, alert: Alert, changes: list[Change]) -> None:
        changes.append((action, alert))
        level = logging.INFO if action == "resolved" else (
            logging.ERROR if alert.severity == "critical" else logging.WARNING)
        self.log.log(level, "alert %s: %s [%s] %s", action, alert.key, alert.severity, alert.message)
        if self.alertmanager:
            self.alertmanager.send(action, alert)  # queued: its thread posts it
