"""Is storage working, now? A real read and write every `every_s` (`Storage.check`, which on SQLite
also checks the file's identity and its pages), so a fault is found within seconds even while no
push comes, alerted (the alert manager's in-memory `storage` alert, written to storage once it
recovers), counted, and seen by the readiness probe.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

from clockfabric.controller.storage.base import Storage, StorageError

log = logging.getLogger(__name__)


class StorageWatch:
    def __init__(self, storage: Storage, *, report: Callable[[StorageError, int], None] | None = None,
                 clock: Callable[[], int] = time.time_ns, every_s: float = 1.0) -> None:
        """`report`: told of each failed check (the monitor's `storage_failed`, which raises the alert)."""
        self.storage = storage
        self.report = report
        self.clock = clock
        self.every_s = every_s
        self.error: StorageError | None = None  # what the last check met; None if it passed
        self.passed_at: float | None = None  # monotonic time of the last check that passed
        self.faults: Counter[str] = Counter()  # faults found, by kind, counted when each begins
        self.size_bytes: int | None = None

    def check(self) -> None:
        """One check. Storage failing is what this looks for: it never raises for it."""
        now = self.clock()
        try:
            self.storage.check(now)
            size = self.storage.size_bytes()
        except StorageError as e:
            if self.error is None or self.error.kind != e.kind:
                self.faults[e.kind] += 1
                log.error("storage check failed (%s): %s", e.kind, e)
            self.error = e
            if self.report is not None:
                self.report(e, now)
            return
        if self.error is not None:
            log.warning("storage check passes again after %s", self.error.kind)
        self.error, self.passed_at, self.size_bytes = None, time.monotonic(), size

    def healthy(self) -> str | None:
        """None while the last check passed, and recently; else why not, in a few words."""
        if self.error is not None:
            return f"failing: {self.error.kind}"
        if self.passed_at is None:
            return "not checked yet"
        age = time.monotonic() - self.passed_at
        if age > max(3.0, 3 * self.every_s):  # the check itself hangs, or its loop is dead
            return f"last passed {age:.0f} s ago"
        return None
