"""Every enabled detector behind one front: feed it what agents push, ask what should be open."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from clockfabric.controller.config import MonitorConfig
from clockfabric.controller.detectors.base import Finding, LinkIndex
from clockfabric.controller.detectors.congestion import Congestion
from clockfabric.controller.detectors.drift import TopologyDrift
from clockfabric.controller.detectors.flapping import Flapping
from clockfabric.controller.detectors.latency_sla import LatencySla
from clockfabric.controller.detectors.link_down import LinkDown
from clockfabric.controller.storage.base import Event, Sample
from clockfabric.topology.model import Topology


class DetectorSet:
    """Pure logic: no I/O, no clock of its own; times come with the calls."""

    def __init__(self, config: MonitorConfig | None = None, topology: Topology | None = None):
        config = config or MonitorConfig()
        links = LinkIndex(topology)

        sla, cong = config.latency_sla, config.congestion
        self.link_down = LinkDown(config.link_down, links) if config.link_down.enabled else None
        self.flapping = Flapping(config.flapping, links) if config.flapping.enabled else None
        self.latency_sla = LatencySla(sla, config.stale_after_ns) if sla.enabled else None
        self.congestion = Congestion(cong, config.stale_after_ns, links) if cong.enabled else None
        # without a topology nothing is expected, so nothing can drift
        drift_on = config.topology_drift.enabled and topology is not None
        self.drift = TopologyDrift(config.topology_drift, links) if drift_on else None

    def on_events(self, events: Iterable[Event], now_ns: int) -> None:
        events = list(events)
        if self.link_down:
            self.link_down.on_events(events)
        if self.flapping:
            self.flapping.on_events(events, now_ns)

    def on_samples(self, samples: Iterable[Sample], now_ns: int) -> None:
        """OWD samples by path, link state samples (their windows are the samples' own times), LLDP neighbours."""
        samples = list(samples)
        if self.link_down:
            self.link_down.on_samples(samples)
        if self.latency_sla:
            self.latency_sla.on_samples(samples)
        if self.congestion:
            self.congestion.on_samples(samples)
        for s in samples:  # what LLDP tells a host or switch agent: the neighbour of each port
            if s.name == "lldp_neighbour" and "device" in s.labels:
                self.on_neighbours(s.host, s.labels["device"], s.labels.get("neighbour") or None, now_ns)

    def on_neighbours(self, host: str, nic: str, seen_neighbour: str | None, now_ns: int) -> None:
        if self.drift:
            self.drift.on_neighbours(host, nic, seen_neighbour, now_ns)

    def set_path_links(self, mapping: Mapping[tuple[str, str, str], list[str]], src: str | None = None) -> None:
        """(src, dst, path label) -> the topology link names the path crosses; with `src`, for
        that host's paths only."""
        if self.congestion:
            self.congestion.set_path_links(mapping, src)

    def active(self, now_ns: int) -> dict[str, Finding]:
        found: list[Finding] = []
        if self.link_down:
            found += self.link_down.findings()
        if self.flapping:
            found += self.flapping.findings(now_ns)
        if self.latency_sla:
            found += self.latency_sla.findings(now_ns)
        if self.congestion:
            found += self.congestion.findings(now_ns)
        if self.drift:
            found += self.drift.findings()
        return {f.key: f for f in found}
