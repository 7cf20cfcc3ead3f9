"""A value worked out at most once per spell per key, for routes that every open page asks again
and again (the heatmap re-renders on each push, at most once a second, on every page).

A question is worked out again once its last working-out is `max_age_s` old, and whoever asks
waits for it. A working-out that takes longer than SHARE of that is slow: the next one starts no
sooner than 1/SHARE times as long after it began (however many pages ask, one question costs at
most SHARE of a thread, so a fleet whose delays take seconds to read is read every few tens of
seconds, not back to back), and meanwhile every ask is answered at once with the last value and
its age, the next one worked out behind it. A caller with nothing to be served waits up to
`wait_s`, then gets Pending; the working-out goes on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
MAX_KEYS = 64  # past it the oldest go: keys come from request parameters
SHARE = 0.25  # of a thread, the most one question's workings-out take while asked without pause


class Pending(Exception):
    """A first working-out still running past what a caller waits: ask again shortly."""


@dataclass(frozen=True)
class Served(Generic[T]):
    value: T
    age_s: float  # since its working-out began
    took_s: float  # how long that working-out took


@dataclass(frozen=True)
class _Kept(Generic[T]):
    started: float  # when its working-out began: what it read was read since
    took: float
    value: T


class Fresh(Generic[T]):
    def __init__(self, max_age_s: float = 1.0, wait_s: float = 2.0, clock: Callable[[], float] = time.monotonic):
        self.max_age_s = max_age_s
        self.wait_s = wait_s
        self.clock = clock
        self._kept: dict[Hashable, _Kept[T]] = {}
        self._tried: dict[Hashable, float] = {}  # when the last working-out began, whether or not it ended well
        self._running: dict[Hashable, Future[_Kept[T]]] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, work: Callable[[], T]) -> Served[T]:
        """`work()`'s result for `key`, its age and how long it took; raises what `work` raised
        for a caller that waited on it, and Pending as above."""
        with self._lock:
            kept, now = self._kept.get(key), self.clock()
            due = kept is None or now - self._tried.get(key, kept.started) >= self._spacing(kept)
            running = self._running.get(key)
            if due and running is None:
                running = self._start(key, work, now)
        if kept is not None and (running is None or self._slow(kept)):
            return Served(kept.value, now - kept.started, kept.took)
        assert running is not None
        try:
            done = running.result(timeout=self.wait_s)
        except FutureTimeout:
            raise Pending(f"still being read, for longer than the {self.wait_s:g} s a route waits: "
                          "ask again shortly") from None
        return Served(done.value, self.clock() - done.started, done.took)

    def _slow(self, kept: _Kept[T]) -> bool:
        return kept.took > SHARE * self.max_age_s

    def _spacing(self, kept: _Kept[T]) -> float:
        return max(self.max_age_s, kept.took / SHARE)

    def _start(self, key: Hashable, work: Callable[[], T], now: float) -> Future[_Kept[T]]:
        """Work `key` out on a thread of its own (under the lock)."""
        future: Future[_Kept[T]] = Future()
        self._running[key], self._tried[key] = future, now

        def run() -> None:
            try:
                value = work()
            except BaseException as e:  # handed to whoever waits on it
                with self._lock:
                    del self._running[key]
                    if key not in self._kept:  # nothing to space from: keys come from request parameters
                        self._tried.pop(key, None)
                future.set_exception(e)
                return
            done = _Kept(now, self.clock() - now, value)
            with self._lock:
                self._kept[key] = done
                del self._running[key]
                while len(self._kept) > MAX_KEYS:
                    oldest = min(self._kept, key=lambda k: self._kept[k].started)
                    del self._kept[oldest]
                    self._tried.pop(oldest, None)
            future.set_result(done)

        threading.Thread(target=run, name="dashboard-read", daemon=True).start()
        return future


class Drawn:
    """What is drawn from a served value (a page or block of it, as text), kept while that value
    is the one served: every open page asks again each second, and a fleet's reading that takes
    seconds is served for as many asks. Per source (a Fresh key), the drawings of its current
    value alone, MAX_KEYS of them at most."""

    def __init__(self) -> None:
        self._kept: dict[Hashable, tuple[object, dict[Hashable, str]]] = {}
        self._lock = threading.Lock()

    def get(self, source: Hashable, value: object, key: Hashable, draw: Callable[[], str]) -> str:
        """draw()'s text for `key` of `value`, drawn once while `value` is `source`'s."""
        with self._lock:
            kept = self._kept.get(source)
            if kept is None or kept[0] is not value:
                kept = self._kept[source] = (value, {})
                while len(self._kept) > MAX_KEYS:
                    del self._kept[next(iter(self._kept))]
            text = kept[1].get(key)
        if text is None:
            text = draw()  # outside the lock: two first asks may both draw, alike
            with self._lock:
                drawings = kept[1]
                drawings[key] = text
                while len(drawings) > MAX_KEYS:
                    del drawings[next(iter(drawings))]
        return text
