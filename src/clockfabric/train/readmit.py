"""Drained hosts and their way back: a host lost from a job is audited alone until it passes.

A rank's host that was replaced (killed, frozen, cut off, a GPU fault) is drained: it is given
no work and cannot be added as a spare by hand. A thread audits each drained host, never the
coordinator's tick (an audit takes seconds): at once, then after `interval_s`, the wait doubling
after each failure up to `max_interval_s`. A pass returns the host to the spare pool
(`give_back`); a failure is told once per change of what fails, not at every audit.

The audit itself is passed in (`HostAudit`): the command line builds it from
`clockfabric audit`'s checks, so this package does not import its peer, the audit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

INTERVAL_S = 5.0
MAX_INTERVAL_S = 60.0


@dataclass(frozen=True)
class AuditResult:
    checks: list[str]  # the checks run on the host
    failing: dict[str, str] = field(default_factory=dict)  # check id -> what it found on the host

    @property
    def passed(self) -> bool:
        return not self.failing


# (host, healthy peers its NICs may be tried against) -> what the audit found on the host
HostAudit = Callable[[str, list[str]], AuditResult]


@dataclass
class Drained:
    why: str
    due: float  # when it is next audited (monotonic)
    wait_s: float  # the wait after the next failure
    failing: dict[str, str] | None = None  # what failed last time it was audited (None: not yet)


class Readmission(threading.Thread):
    """The drained hosts of a job; with an audit, the thread that returns them once they pass."""

    def __init__(self, audit: HostAudit | None, give_back: Callable[[str], None],
                 event: Callable[..., None], peers: Callable[[], list[str]], *,
                 interval_s: float = INTERVAL_S, max_interval_s: float = MAX_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(name="train readmission", daemon=True)
        if interval_s <= 0 or max_interval_s < interval_s:
            raise ValueError("the audit interval must be above 0 and at most its maximum")
        self.audit, self.give_back, self.event, self.peers = audit, give_back, event, peers
        self.interval_s, self.max_interval_s, self.clock = interval_s, max_interval_s, clock
        self.hosts: dict[str, Drained] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def drain(self, host: str, why: str) -> None:
        """host is given no work until it passes the audit; it is first audited at once."""
        with self.lock:
            self.hosts[host] = Drained(why, self.clock(), self.interval_s)

    def why(self, host: str) -> str | None:
        """Why host is drained (None if it is not)."""
        with self.lock:
            drained = self.hosts.get(host)
        return drained.why if drained else None

    def step(self) -> None:
        """Audit every drained host that is due, one after another (in the caller's thread)."""
        if self.audit is None:
            return  # no re-admission: drained hosts stay drained
        with self.lock:
            due = [h for h, d in self.hosts.items() if d.due <= self.clock()]
        for host in due:
            if self.stopping.is_set():
                return
            self._audit(host)

    def _audit(self, host: str) -> None:
        assert self.audit is not None
        try:
            result = self.audit(host, [p for p in self.peers() if p != host])
        except Exception as e:  # noqa: BLE001 - an audit that cannot run is a failed one, tried again later
            result = AuditResult([], {"audit": f"the audit did not run: {type(e).__name__}: {e}"[:300]})
        with self.lock:
            drained = self.hosts[host]
            if not result.passed:
                changed = result.failing != drained.failing
                drained.failing, drained.due = result.failing, self.clock() + drained.wait_s
                drained.wait_s = min(2 * drained.wait_s, self.max_interval_s)
            else:
                del self.hosts[host]
        if result.passed:
            self.event("audit passed", host=host, checks=result.checks)
            self.give_back(host)
        elif changed:
            self.event("audit failed", host=host, failing=result.failing, checks=result.checks,
                       next_s=round(drained.due - self.clock(), 1))

    def run(self) -> None:
        while not self.stopping.wait(0.2):
            self.step()

    def stop(self, timeout_s: float = 5.0) -> None:
        """No more audits; an audit under way is waited for up to timeout_s (its result is dropped
        by the coordinator, which is stopping too)."""
        self.stopping.set()
        if self.is_alive():
            self.join(timeout_s)

