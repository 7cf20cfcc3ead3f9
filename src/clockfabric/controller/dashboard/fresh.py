"""A value worked out at most once per `max_age_s` per key, for routes that every open page asks
again and again (the heatmap re-renders on each push, at most once a second, on every page):
whoever asks within `max_age_s` of the last working-out gets its result, never older."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")
MAX_KEYS = 64  # past it the oldest go: keys come from request parameters


class Fresh(Generic[T]):
    def __init__(self, max_age_s: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.max_age_s = max_age_s
        self.clock = clock
        self._kept: dict[Hashable, tuple[float, T]] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, work: Callable[[], T]) -> T:
        """`work()`'s result for `key`, worked out now unless it was within the last `max_age_s`."""
        with self._lock:
            kept = self._kept.get(key)
        if kept is not None and self.clock() - kept[0] < self.max_age_s:
            return kept[1]
        started = self.clock()  # its age counts from before the work: what it read was read since
        value = work()
        with self._lock:
            self._kept[key] = (started, value)
            while len(self._kept) > MAX_KEYS:
                del self._kept[min(self._kept, key=lambda k: self._kept[k][0])]
        return value
