"""Hardware telemetry: the enabled collectors (telemetry/), read at scrape time, and the
Prometheus /metrics endpoint that serves them with the clock state of the last update."""

from __future__ import annotations

from clockfabric.agent.context import AgentContext
from clockfabric.agent.metrics import AgentMetrics, serve
from clockfabric.agent.service import Service, Snapshot, service
from clockfabric.errors import ClockfabricError
from clockfabric.telemetry.base import COLLECTORS, CollectorContext, Collectors


@service("telemetry", help="Telemetry collectors and the Prometheus /metrics endpoint")
class Telemetry(Service):
    def __init__(self, ctx: AgentContext):
        cfg = ctx.cfg
        context = CollectorContext(ctx.rails, ctx.links, ctx.neighbours)
        self.collectors = Collectors(entry.factory(context)
                                     for entry in COLLECTORS.enabled(cfg.collectors, cfg.no_collectors))
        self.server = None
        if cfg.metrics_port:
            try:
                self.server = serve(AgentMetrics(cfg.host, self.collectors, lambda: ctx.latest),
                                    ctx.address, cfg.metrics_port)
            except OSError as e:
                raise ClockfabricError(f"cannot serve /metrics on {ctx.address}:{cfg.metrics_port} ({e.strerror}): "
                                       f"give another --metrics-port, or 0 for none") from None

    def report(self) -> dict:
        return {"telemetry_not_present": self.collectors.absent}

    def snapshot(self) -> Snapshot:
        return Snapshot(info={"telemetry_not_present": self.collectors.absent})

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
        self.collectors.close()
