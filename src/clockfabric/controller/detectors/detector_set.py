"""Every enabled detector behind one front: feed it what agents push, ask what should be open."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from clockfabric.controller.detectors.base import DETECTORS, Detector, DetectorContext, Finding, LinkIndex
from clockfabric.controller.detectors.config import DetectorConfig, S
from clockfabric.controller.series.sample import Sample
from clockfabric.controller.storage.base import Event
from clockfabric.topology.model import Topology


def config_types() -> dict[str, type[DetectorConfig]]:
    """Each detector's section of the monitor config: its name, and its config class."""
    return {e.name: e.factory.config_type for e in DETECTORS.entries()}


def _defaults() -> dict[str, DetectorConfig]:
    return {name: kind() for name, kind in config_types().items()}


@dataclass(frozen=True)
class MonitorConfig:
    """The detectors' settings (controller/config.py reads them from a file)."""

    stale_after_ns: int = 60 * S  # a path with no sample this long is forgotten (its alerts resolve)
    detectors: dict[str, DetectorConfig] = field(default_factory=_defaults)  # each one's section, by its name


class DetectorSet:
    """Pure logic: no I/O, no clock of its own; times come with the calls.

    A detector is on when its config section says `enabled` (and, for one that compares with
    the topology, when there is one); each call goes to every detector that is on."""

    def __init__(self, config: MonitorConfig | None = None, topology: Topology | None = None):
        config = config or MonitorConfig()
        ctx = DetectorContext(LinkIndex(topology), config.stale_after_ns)
        self.detectors: dict[str, Detector] = {
            e.name: e.factory(config.detectors[e.name], ctx) for e in DETECTORS.entries()
            if config.detectors[e.name].enabled and (topology is not None or not e.factory.needs_topology)}
        # told of each detector's run and its duration in seconds (the controller's metrics), if set
        self.ran: Callable[[str, float], None] | None = None

    def on_events(self, events: Iterable[Event], now_ns: int) -> None:
        events = list(events)
        for d in self.detectors.values():
            d.on_events(events, now_ns)

    def reads(self) -> tuple[str, ...]:
        """Every sample name a detector that is on uses, and the LLDP neighbours (on_neighbours)."""
        return tuple(sorted({"lldp_neighbour"}.union(*(d.reads() for d in self.detectors.values()))))

    def asks(self) -> dict[str, dict]:
        """What hosts should work out for the detectors that are on, by detector: every push's answer carries it."""
        return {name: asked for name, d in self.detectors.items() if (asked := d.asks())}

    def on_samples(self, samples: Iterable[Sample], now_ns: int) -> None:
        """OWD samples by path, link state samples (their windows are the samples' own times), LLDP neighbours."""
        samples = list(samples)
        for d in self.detectors.values():
            d.on_samples(samples, now_ns)
        for s in samples:  # what LLDP tells a host or switch agent: the neighbour of each port
            if s.name == "lldp_neighbour" and "device" in s.labels:
                self.on_neighbours(s.host, s.labels["device"], s.labels.get("neighbour") or None, now_ns)

    def on_neighbours(self, host: str, nic: str, seen_neighbour: str | None, now_ns: int) -> None:
        for d in self.detectors.values():
            d.on_neighbours(host, nic, seen_neighbour, now_ns)

    def set_path_links(self, mapping: Mapping[tuple[str, str, str], list[str]], src: str | None = None) -> None:
        """(src, dst, path label) -> the topology link names the path crosses; with `src`, for
        that host's paths only."""
        for d in self.detectors.values():
            d.set_path_links(mapping, src)

    def active(self, now_ns: int) -> dict[str, Finding]:
        found: dict[str, Finding] = {}
        for name, d in self.detectors.items():
            started = time.perf_counter()
            found.update((f.key, f) for f in d.findings(now_ns))
            if self.ran is not None:
                self.ran(name, time.perf_counter() - started)
        return found
