"""The controller's own Prometheus metrics (`GET /metrics`, with the fleet token): pushes, detectors,
alerts, storage, its threads. One registry per app, so that several apps in one process (tests,
`monitor` on a lab) never share counts.

Pushes are counted by an ASGI middleware on the push route, so every outcome is seen, a refusal
before the body is read (401, 413) too; a push is stored when it is answered 200, and refused for
the reason its status says.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.core import Metric as Family

PREFIX = "clockfabric_controller_"
PUSH_PATH = "/api/v1/push"
REFUSALS = {202: "pending", 401: "unauthorised", 403: "unknown_host", 413: "too_large", 422: "invalid",
            503: "storage"}
PUSH_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
DETECTOR_BUCKETS_S = (1e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1.0)
FEED_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)
FEED_BEHIND_BUCKETS_S = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


@dataclass
class State:
    """What the controller holds now, read at each scrape (no database read: a scrape must answer
    while storage fails)."""
    ready: bool
    open_alerts: dict[str, int]  # by kind
    storage_errors: dict[str, int]  # every StorageError met, by kind
    storage_faults: dict[str, int]  # faults the storage check found, by kind, counted as each began
    thread_restarts: dict[str, int]
    database_bytes: int | None
    alertmanager: dict[str, int] = field(default_factory=dict)  # alerts sent, dropped, posts failed; pending
    alertmanager_up: dict[str, int] = field(default_factory=dict)  # by URL: 1 while it takes alerts


ALERTMANAGER_HELP = {
    "alerts_sent": "Alerts an Alertmanager took (a re-post of a firing alert counts again).",
    "alerts_dropped": "Alerts given up: pushed out of a full queue, or refused.",
    "post_failures": "Posts to an Alertmanager that failed.",
    "pending": "Alerts queued for an Alertmanager that has not taken them.",
}


class ControllerMetrics:
    def __init__(self, state: Callable[[], State]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.pushes_received = Counter(f"{PREFIX}pushes_received", "Pushes received, whatever their outcome.",
                                       registry=r)
        self.pushes_stored = Counter(f"{PREFIX}pushes_stored", "Pushes stored (answered 200).", registry=r)
        self.pushes_refused = Counter(f"{PREFIX}pushes_refused", "Pushes refused, by reason (unauthorised, "
                                      "unknown_host, wrong_host, revoked, pending (held for approval), rejected, "
                                      "pending_full, too_large, invalid, storage, client_disconnect, other).",
                                      ["reason"], registry=r)
        self.push_duration = Histogram(f"{PREFIX}push_duration_seconds", "Time to answer a push, body read included.",
                                       buckets=PUSH_BUCKETS_S, registry=r)
        self.detector_duration = Histogram(f"{PREFIX}detector_duration_seconds",
                                           "Time of one detector run (its findings at a tick); _count is the runs.",
                                           ["detector"], buckets=DETECTOR_BUCKETS_S, registry=r)
        self.feed_duration = Histogram(f"{PREFIX}feed_duration_seconds",
                                       "Time to read the detectors' samples from the series engine at a tick (past "
                                       "the tick, the detectors fall behind); _count is the reads.",
                                       buckets=FEED_BUCKETS_S, registry=r)
        self.feed_behind = Histogram(f"{PREFIX}feed_behind_seconds",
                                     "How far behind the fleet the detectors were at each read that fed them: "
                                     "the oldest sample it fed, its age at the read's end.",
                                     buckets=FEED_BEHIND_BUCKETS_S, registry=r)
        self.feed_samples = Counter(f"{PREFIX}feed_samples", "Samples the detectors were fed.", registry=r)
        self.feed_failures = Counter(f"{PREFIX}feed_failures", "Ticks whose read of the detectors' samples the "
                                     "series engine refused or did not answer within its budget.", registry=r)
        r.register(_StateCollector(state))

    def push_answered(self, status: int, seconds: float, reason: str | None = None) -> None:
        self.pushes_received.inc()
        self.push_duration.observe(seconds)
        if status == 200:
            self.pushes_stored.inc()
        else:
            self.pushes_refused.labels(reason or REFUSALS.get(status, "other")).inc()

    def detector_ran(self, detector: str, seconds: float) -> None:
        self.detector_duration.labels(detector).observe(seconds)

    def feed_read(self, seconds: float, samples: int | None, behind_s: float | None = None) -> None:
        """A tick's read of the detectors' samples: how long, how many (None: it failed), and the
        oldest one's age at its end (None: none fed)."""
        self.feed_duration.observe(seconds)
        if behind_s is not None:
            self.feed_behind.observe(behind_s)
        if samples is None:
            self.feed_failures.inc()
        else:
            self.feed_samples.inc(samples)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector:
    def __init__(self, state: Callable[[], State]) -> None:
        self.state = state

    def collect(self) -> Iterator[Family]:
        s = self.state()
        yield GaugeMetricFamily(f"{PREFIX}ready", "1 while /readyz answers 200 (storage checked, threads alive).",
                                value=int(s.ready))
        yield _by(GaugeMetricFamily, "alerts_open", "Open alerts, by kind.", "kind", {"storage": 0, **s.open_alerts})
        yield _by(CounterMetricFamily, "storage_errors", "Storage errors met (requests, ticks, checks), by kind.",
                  "kind", s.storage_errors)
        yield _by(CounterMetricFamily, "storage_faults", "Storage faults the storage check found, by kind.",
                  "kind", s.storage_faults)
        yield _by(CounterMetricFamily, "thread_restarts", "Background loops restarted after a failure, by loop.",
                  "thread", s.thread_restarts)
        if s.database_bytes is not None:
            yield GaugeMetricFamily(f"{PREFIX}database_size_bytes", "The database's size on disk, at the last check.",
                                    value=s.database_bytes)
        for name, value in s.alertmanager.items():
            family = GaugeMetricFamily if name == "pending" else CounterMetricFamily
            yield family(f"{PREFIX}alertmanager_{name}", ALERTMANAGER_HELP[name], value=value)
        if s.alertmanager_up:
            yield _by(GaugeMetricFamily, "alertmanager_up", "1 while this Alertmanager takes alerts, by URL.",
                      "url", s.alertmanager_up)

    def describe(self) -> list[Family]:
        return []  # built at each scrape: nothing to check at registration


def _by(family: type, name: str, help_: str, label: str, values: dict[str, int]) -> Family:
    out = family(f"{PREFIX}{name}", help_, labels=[label])
    for key, value in sorted(values.items()):
        out.add_metric([key], value)
    return out


class PushMetrics:
    """ASGI middleware: the status and duration of every push."""

    def __init__(self, app, metrics: ControllerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] != PUSH_PATH:
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = 500  # unless a response starts

        async def sending(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            # the route's own word on a refusal, where the status alone does not tell it (request.state)
            self.metrics.push_answered(status, time.perf_counter() - started, scope.get("state", {}).get("refusal"))
