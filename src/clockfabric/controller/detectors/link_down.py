"""Link down: a link is down while any end's latest report says so.

Agents report their NICs; a switch port reports the same way under the switch's name (the lab,
or an exporter on the switch), so both ends of one cable make one alert, named after the
topology link. A link is assumed up until some end reports it down.

Reports are link events and the "link_up" state samples (labels: device) each push carries:
the samples restore the state after a controller restart or a lost event. The newest report
of an end wins; a down's start is the first report of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from clockfabric.controller.detectors.base import DETECTORS, Detector, DetectorContext, Finding
from clockfabric.controller.detectors.config import DetectorConfig
from clockfabric.controller.series.sample import Sample
from clockfabric.controller.storage.base import Event
from clockfabric.topology.model import Port

UPNESS = {"link_down": False, "link_up": True}  # "link_change" keeps up-ness (see telemetry/link_state.py)


@dataclass(frozen=True)
class LinkDownConfig(DetectorConfig):
    severity: str = "critical"


@DETECTORS.register("link_down", help="A link is down while any end's latest report says so")
class LinkDown(Detector[LinkDownConfig]):
    config_type = LinkDownConfig

    def __init__(self, config: LinkDownConfig, ctx: DetectorContext):
        super().__init__(config, ctx)
        self.links = ctx.links
        self.ends: dict[Port, tuple[int, bool, int]] = {}  # each reporting end: (latest report, up, since)

    def on_events(self, events: Iterable[Event], now_ns: int) -> None:
        for e in events:
            if e.kind in UPNESS and e.device:
                self._report(Port(e.host, e.device), e.t_ns, UPNESS[e.kind])

    def reads(self) -> frozenset[str]:
        return frozenset({"link_up"})

    def on_samples(self, samples: Iterable[Sample], now_ns: int) -> None:
        for s in samples:
            if s.name == "link_up" and s.labels.get("device"):
                self._report(Port(s.host, s.labels["device"]), s.t_ns, s.value > 0)

    def _report(self, port: Port, t_ns: int, up: bool) -> None:
        last = self.ends.get(port)
        if last and t_ns <= last[0]:  # a late report does not undo a newer one
            return
        self.ends[port] = (t_ns, up, last[2] if last and last[1] == up else t_ns)

    def findings(self, now_ns: int) -> list[Finding]:
        down: dict[str, dict[str, int]] = {}  # link key -> {down end: since}
        for port, (_, up, since_ns) in self.ends.items():
            if not up:
                down.setdefault(self.links.key(port.node, port.iface), {})[str(port)] = since_ns
        out = []
        for key, ends in sorted(down.items()):
            link = self.links.by_name.get(key)
            what = f"link {key}" if link else f"{key} (not a link in the topology)"
            out.append(Finding(
                key=f"link_down:{key}", kind="link_down", severity=self.config.severity,
                message=f"{what} is down, reported by {', '.join(sorted(ends))}",
                detail={"link": link.name if link else None, "ends_down": dict(sorted(ends.items())),
                        "since_ns": min(ends.values())}))
        return out
