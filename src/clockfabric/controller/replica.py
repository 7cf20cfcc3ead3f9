"""One controller replica of several on one PostgreSQL: every replica serves the API and stores
pushes; the one holding the leader lease (controller.lease) runs the detectors, the alerts and
their posts to Alertmanager, once for the fleet.

The API keeps nothing in memory that another replica would need: pushes go to the database,
and host staleness is read from it. The leader feeds its detectors from the database, not from
the pushes it happened to receive: it tails the events table by id (and reads samples from the
series engine, controller.series.feed). Ids are taken
when a push starts and seen when it commits, so a slower push may show a lower id after a faster
one: each read looks back LOOKBACK ids behind the newest seen, and skips the ids it has fed.
On taking the lease a replica builds its monitor afresh (replaying recent history from the
database, as a restarted controller does), so a replica that leads again never feeds twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from clockfabric.controller.storage.base import Event, FenceLost, Storage

log = logging.getLogger(__name__)
LOOKBACK = {"events": 5_000}
PAGE = 5_000
MAX_PER_TICK = 200_000  # rows fed per tick and table; more wait for the next tick (logged)


class Tail:
    """New rows of `events`, in id order, each once."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.newest = {"events": storage.last_event_id()}
        self.fed: dict[str, set[int]] = {"events": set()}

    def events(self) -> list[Event]:
        return self._read("events", lambda after: self.storage.events(after_id=after, limit=PAGE))

    def _read(self, table: str, page_after: Callable[[int], list[Any]]) -> list[Any]:
        low = max(0, self.newest[table] - LOOKBACK[table])
        fed = self.fed[table]
        out: list[Any] = []
        after = low
        while len(out) < MAX_PER_TICK:
            page = page_after(after)
            out += [r for r in page if r.id not in fed]
            if len(page) < PAGE:
                break
            after = page[-1].id
        if len(out) >= MAX_PER_TICK:
            log.warning("leader: %s arrive faster than the detectors take them; %d fed this tick", table, len(out))
        fed.update(r.id for r in out)
        self.newest[table] = max([self.newest[table], *(r.id for r in out)])
        floor = self.newest[table] - LOOKBACK[table]
        self.fed[table] = {i for i in fed if i > floor}
        return out


class Replica:
    def __init__(self, storage: Storage, lease: Any, make_monitor: Callable[[], Any]):
        """`lease`: lease.Lease; `make_monitor`: a fresh Monitor, replayed from storage."""
        self.storage = storage
        self.lease = lease
        self.make_monitor = make_monitor
        self.monitor: Any = None  # the leader's; None on a follower
        self._tail: Tail | None = None
        self._generation = 0

    @property
    def leading(self) -> bool:
        return self.monitor is not None

    def tick(self, now_ns: int, stale: set[str], series_down: str | None = None, rules_down: str | None = None) -> None:
        """Once a second: hold the lease; if held, feed and run the detectors and alerts, fenced.
        `series_down`, `rules_down`: why the series engine, vmalert do not answer (None while they do)."""
        if not self.lease.hold():
            return self._step_down()
        if self.lease.generation != self._generation:
            self._step_down()
            self._generation = self.lease.generation
            self._tail = Tail(self.storage)  # before the replay: a row between the two is fed, not missed
            self.monitor = self.make_monitor()
        assert self._tail is not None  # set with the monitor
        try:
            with self.storage.fenced(self.lease.guard()):
                self.monitor.observe(self._tail.events(), [], now_ns)
                self.monitor.tick(now_ns, stale=stale, series_down=series_down, rules_down=rules_down)
        except FenceLost as e:
            log.warning("leader: %s; stepping down", e)
            self._step_down()

    def _step_down(self) -> None:
        if self.monitor is not None:
            self.monitor.alerts.close()
        self.monitor, self._tail, self._generation = None, None, 0

    def close(self) -> None:
        self._step_down()
        self.lease.close()
