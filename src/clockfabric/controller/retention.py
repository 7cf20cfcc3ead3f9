"""The retention job: how long raw samples and per-minute aggregates are kept (hourly ones are
kept for good), run by the leader every `every_s` (storage.retention does the work).

Events, alerts and audits are not touched: they are few beside the samples (see docs/deploy.md,
"Scaling out", for the sizes a fleet reaches).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from clockfabric.controller.storage.base import Storage, StorageError
from clockfabric.errors import ClockfabricError

log = logging.getLogger(__name__)
DAY_NS = 86_400 * 10**9


@dataclass
class Retention:
    storage: Storage
    raw_days: float = 7.0
    minute_days: float = 90.0
    every_s: float = 600.0
    last_run_ns: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.raw_days <= self.minute_days:
            raise ClockfabricError(f"retention: raw samples kept {self.raw_days} days, minute aggregates "
                                   f"{self.minute_days}: both above 0, minutes at least as long as raw")

    def run_if_due(self, now_ns: int) -> dict[str, int] | None:
        """Roll up and delete what has aged out, if `every_s` has passed since the last run."""
        if now_ns - self.last_run_ns < self.every_s * 1e9:
            return None
        self.last_run_ns = now_ns
        try:
            done = self.storage.roll_up(now_ns - round(self.raw_days * DAY_NS),
                                        now_ns - round(self.minute_days * DAY_NS))
        except StorageError as e:
            log.warning("retention: storage failed (%s); tried again in %.0f s", e, self.every_s)
            return None
        if done["raw_deleted"] or done["minutes_deleted"]:
            log.info("retention: %s", ", ".join(f"{k} {v}" for k, v in done.items()))
        return done
