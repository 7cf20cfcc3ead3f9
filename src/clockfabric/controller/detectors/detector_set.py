"""Every enabled detector behind one front: feed it what agents push, ask what should be open."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from clockfabric.controller.config import MonitorConfig
from clockfabric.controller.detectors.base import DETECTORS, Finding, LinkIndex
from clockfabric.controller.storage.base import Event, Sample
from clockfabric.topology.model import Topology

HOOKS = ("on_events", "on_samples", "on_neighbours", "set_path_links")  # `findings`: by name, timed


class DetectorSet:
    """Pure logic: no I/O, no clock of its own; times come with the calls.

    A detector is on when its config section says `enabled` (and, for one that compares with
    the topology, when there is one); each call goes to the detectors that implement it."""

    def __init__(self, config: MonitorConfig | None = None, topology: Topology | None = None):
        config = config or MonitorConfig()
        links = LinkIndex(topology)
        self.detectors = {e.name: e.factory(config, links) for e in DETECTORS.entries()
                          if getattr(config, e.name).enabled
                          and (topology is not None or not e.meta.get("needs_topology"))}
        self._hooks = {hook: [getattr(d, hook) for d in self.detectors.values() if hasattr(d, hook)] for hook in HOOKS}
        self._findings = [(name, d.findings) for name, d in self.detectors.items() if hasattr(d, "findings")]
        # told of each detector's run and its duration in seconds (the controller's metrics), if set
        self.ran: Callable[[str, float], None] | None = None

    def on_events(self, events: Iterable[Event], now_ns: int) -> None:
        events = list(events)
        for on_events in self._hooks["on_events"]:
            on_events(events, now_ns)

    def on_samples(self, samples: Iterable[Sample], now_ns: int) -> None:
        """OWD samples by path, link state samples (their windows are the samples' own times), LLDP neighbours."""
        samples = list(samples)
        for on_samples in self._hooks["on_samples"]:
            on_samples(samples, now_ns)
        for s in samples:  # what LLDP tells a host or switch agent: the neighbour of each port
            if s.name == "lldp_neighbour" and "device" in s.labels:
                self.on_neighbours(s.host, s.labels["device"], s.labels.get("neighbour") or None, now_ns)

    def on_neighbours(self, host: str, nic: str, seen_neighbour: str | None, now_ns: int) -> None:
        for on_neighbours in self._hooks["on_neighbours"]:
            on_neighbours(host, nic, seen_neighbour, now_ns)

    def set_path_links(self, mapping: Mapping[tuple[str, str, str], list[str]], src: str | None = None) -> None:
        """(src, dst, path label) -> the topology link names the path crosses; with `src`, for
        that host's paths only."""
        for set_path_links in self._hooks["set_path_links"]:
            set_path_links(mapping, src)

    def active(self, now_ns: int) -> dict[str, Finding]:
        found: dict[str, Finding] = {}
        for name, findings in self._findings:
            started = time.perf_counter()
            found.update((f.key, f) for f in findings(now_ns))
            if self.ran is not None:
                self.ran(name, time.perf_counter() - started)
        return found
