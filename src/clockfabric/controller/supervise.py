"""The controller's background loops, supervised: a loop whose step raises is logged, counted and
started again on a new thread after a backoff (doubling per failure in a row, up to a cap), so one
bad tick never leaves the controller serving with its alerts dead.

A watchdog thread, which runs no loop's code, restarts the dead ones; `dead()` names the loops
not running now, for the readiness probe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass
class Loop:
    name: str
    step: Callable[[], None]
    every_s: float
    at_start: bool  # run a first step at once, not after `every_s`
    thread: threading.Thread | None = None
    restarts: int = 0
    failures: int = 0
    backoff_s: float = 0.0
    restart_at: float = 0.0  # monotonic time the watchdog may start it again
    last_error: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


class Supervisor:
    def __init__(self, *, backoff_s: float = 0.5, max_backoff_s: float = 30.0, watch_s: float = 0.1) -> None:
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.watch_s = watch_s
        self.loops: dict[str, Loop] = {}
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None

    def add(self, name: str, step: Callable[[], None], every_s: float, *, at_start: bool = False) -> None:
        self.loops[name] = Loop(name, step, every_s, at_start, backoff_s=self.backoff_s)

    def start(self) -> None:
        self._stop.clear()
        for loop in self.loops.values():
            self._spawn(loop)
        self._watchdog = threading.Thread(target=self._watch, name="controller-supervisor", daemon=True)
        self._watchdog.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for thread in [self._watchdog, *(loop.thread for loop in self.loops.values())]:
            if thread is not None:
                thread.join(max(0.0, deadline - time.monotonic()))

    def dead(self) -> list[str]:
        """The loops not running now (failed and waiting out their backoff, or never started)."""
        return [loop.name for loop in self.loops.values() if loop.thread is None or not loop.thread.is_alive()]

    def restarts(self) -> dict[str, int]:
        return {loop.name: loop.restarts for loop in self.loops.values()}

    def _spawn(self, loop: Loop) -> None:
        loop.thread = threading.Thread(target=self._run, args=(loop,), name=f"controller-{loop.name}", daemon=True)
        loop.thread.start()

    def _run(self, loop: Loop) -> None:
        try:
            if loop.at_start:
                loop.step()
            while not self._stop.wait(loop.every_s):
                loop.step()
                loop.backoff_s = self.backoff_s  # a step that went through ends the run of failures
        except Exception as e:
            with loop.lock:
                loop.failures += 1
                loop.last_error = f"{type(e).__name__}: {e}"
                loop.restart_at = time.monotonic() + loop.backoff_s
                log.exception("controller loop %s failed (%s); restarting it in %.1f s", loop.name,
                              loop.last_error, loop.backoff_s)
                loop.backoff_s = min(self.max_backoff_s, loop.backoff_s * 2)

    def _watch(self) -> None:
        while not self._stop.wait(self.watch_s):
            for loop in self.loops.values():
                with loop.lock:
                    due = loop.thread is not None and not loop.thread.is_alive() and time.monotonic() >= loop.restart_at
                    if due and not self._stop.is_set():
                        loop.restarts += 1
                        log.warning("controller loop %s restarted (%d restarts)", loop.name, loop.restarts)
                        self._spawn(loop)
