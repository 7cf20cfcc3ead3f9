"""The controller as a process to run: its background loops (supervised), the storage watch, the
readiness probe and its own metrics.

- `GET /healthz` (app.py): live, the process serves; no token, no storage.
- `GET /readyz`: 200 while the last storage check (a real write and read, every second) passed,
  no push was refused for storage since the last one stored, the series engine and its gate answer,
  and every background loop runs;
  else 503 naming what is not. No token: a kubelet probes it, and
  it tells no more than "storage failing: replaced". An Alertmanager that does not take alerts
  is named under `degraded`, still 200: pushes must go on, its alerts wait in a queue.
- `GET /metrics`: Prometheus text, with the fleet token like the rest of the API (one port, one
  secret, nothing unauthenticated to reach; Prometheus sends it as `authorization` credentials).
"""

from __future__ import annotations

from fastapi import FastAPI, Response
from fastapi.params import Depends
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from clockfabric.controller.alertmanager import AlertmanagerClient
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.health import StorageWatch
from clockfabric.controller.metrics import ControllerMetrics, PushMetrics, State
from clockfabric.controller.supervise import Supervisor


class Operations:
    def __init__(self, fleet: Fleet, *, tick_s: float = 1.0, check_s: float = 1.0) -> None:
        monitor = fleet.monitor
        self.fleet = fleet
        self.watch = StorageWatch(fleet.storage, report=monitor.storage_failed if monitor else None,
                                  clock=fleet.clock, every_s=check_s)
        self.supervisor = Supervisor()
        self.supervisor.add("tick", fleet.tick, tick_s)  # stale hosts, detectors, alerts
        self.supervisor.add("storage-check", self.watch.check, check_s, at_start=True)
        if fleet.series is not None:
            self.supervisor.add("series-check", fleet.series.check, check_s, at_start=True)
        self.metrics = ControllerMetrics(self.state)
        if monitor is not None:
            monitor.detectors.ran = self.metrics.detector_ran
            monitor.fed = self.metrics.feed_read

    def start(self) -> None:
        self.supervisor.start()

    def stop(self) -> None:
        self.supervisor.stop()

    def not_ready(self) -> dict[str, str]:
        """What keeps the controller from being ready, by part; empty when it is."""
        why = {}
        storage = self.watch.healthy()
        if storage:
            why["storage"] = storage
        refused = self.fleet.write_refused  # the check's probe may pass where pushes fail: their word counts
        if refused is not None:
            why["writes"] = f"refused: {refused.kind}"
        if self.fleet.series is not None and self.fleet.series.down:
            why["series"] = self.fleet.series.down
        dead = self.supervisor.dead()
        if dead:
            why["threads"] = "not running: " + ", ".join(dead)
        return why

    def state(self) -> State:
        alerts = self.fleet.monitor.alerts if self.fleet.monitor is not None else None
        client = alerts.alertmanager if alerts else None
        return State(
            ready=not self.not_ready(),
            open_alerts=alerts.open_by_kind() if alerts else {},
            storage_errors=dict(alerts.storage_errors) if alerts else {},
            storage_faults=dict(self.watch.faults),
            thread_restarts=self.supervisor.restarts(),
            database_bytes=self.watch.size_bytes,
            alertmanager=_alertmanager_counts(client),
            alertmanager_up={url: int(up) for url, up in client.up().items()} if client else {})

    def degraded(self) -> dict[str, str]:
        """What works less well but keeps the controller ready: Alertmanagers away, by URL; vmalert down."""
        client = self.fleet.monitor.alerts.alertmanager if self.fleet.monitor is not None else None
        why = {f"alertmanager {url}": f"unreachable: {why}" for url, why in (client.away() if client else {}).items()}
        if self.fleet.series is not None and self.fleet.series.rules_down:
            why["rules"] = self.fleet.series.rules_down
        return why

    def register(self, app: FastAPI, auth: list[Depends]) -> None:
        app.add_middleware(PushMetrics, metrics=self.metrics)

        @app.get("/readyz")
        def readyz() -> JSONResponse:
            why, degraded = self.not_ready(), self.degraded()
            return JSONResponse({"ready": not why, **({"failing": why} if why else {}),
                                 **({"degraded": degraded} if degraded else {})}, status_code=503 if why else 200)

        @app.get("/metrics", dependencies=auth)
        def metrics() -> Response:
            return Response(self.metrics.render(), media_type=CONTENT_TYPE_LATEST)


def _alertmanager_counts(client: AlertmanagerClient | None) -> dict[str, int]:
    """The Alertmanager client's counters, by their metric names; {} without one."""
    if client is None:
        return {}
    return {"alerts_sent": client.sent, "post_failures": client.failures, "alerts_dropped": client.dropped,
            "pending": client.pending}
