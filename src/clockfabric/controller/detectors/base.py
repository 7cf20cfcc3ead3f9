"""What the detectors share: their registry, the finding each reports, OWD sample keys, streaks,
link names.

Each detector module registers a factory `(MonitorConfig, LinkIndex) -> detector` in
`DETECTORS` under the name of its config section; a detector implements whichever of
on_events / on_samples / on_neighbours / set_path_links / findings it needs (see DetectorSet).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clockfabric.controller.storage.base import Sample
from clockfabric.registry import Registry
from clockfabric.topology.addressing import interfaces
from clockfabric.topology.model import Link, Port, Topology

DETECTORS: Registry = Registry("detector", load="clockfabric.controller.detectors")
PathKey = tuple[str, str, str]  # (src host, dst host, path label): one direction of one path


@dataclass(frozen=True)
class Finding:
    """An alert that should be open now. `key` is stable while the problem lasts."""

    key: str
    kind: str
    severity: str
    message: str
    detail: dict = field(default_factory=dict)  # JSON-safe: it goes to storage and webhooks as is


def owd_path(sample: Sample) -> PathKey | None:
    """The path an OWD sample measures, seen from its source; None for the reverse view.

    Each direction is pushed by its sender as direction "out"; the receiver's "back" copy
    would count the same delays twice.
    """
    labels = sample.labels
    if labels.get("direction", "out") != "out" or not labels.get("peer") or "path" not in labels:
        return None
    return sample.host, labels["peer"], labels["path"]


def path_label(key: PathKey) -> str:
    src, dst, path = key
    return f"{src}->{dst}:{path}"


def format_ns(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.0f} ns"


def keep_recent(readings: dict, since_ns: int) -> list:
    """Drop each key's readings (by time) older than since_ns; the keys left with none are
    dropped too, and returned, so their streaks can go with them."""
    gone = []
    for key in list(readings):
        kept = {t: v for t, v in readings[key].items() if t >= since_ns}
        if kept:
            readings[key] = kept
        else:
            del readings[key]
            gone.append(key)
    return gone


@dataclass
class Streak:
    """k bad windows in a row open it, k good ones in a row close it: one odd window does neither."""

    k: int
    open: bool = False
    run: int = 0  # windows in a row that disagree with `open`
    since_ns: int = 0  # when `open` last flipped
    last_ns: int = -1  # the newest window seen; older ones (re-sent, late) are ignored

    def add(self, t_ns: int, bad: bool) -> bool:
        """Count one window; False if it was not newer than the last."""
        if t_ns <= self.last_ns:
            return False
        self.last_ns = t_ns
        self.run = self.run + 1 if bad != self.open else 0
        if self.run >= self.k:
            self.open, self.run, self.since_ns = bad, 0, t_ns
        return True

    @property
    def quiet(self) -> bool:
        """Good now and not heading towards bad."""
        return not self.open and self.run == 0


class LinkIndex:
    """Topology links by end and by name, so a report from (node, iface) names its cable; and
    hosts by address, so a flow's far end names its host."""

    def __init__(self, topology: Topology | None):
        links = topology.links if topology else []
        self.by_port = {p: lk for lk in links for p in (lk.a, lk.b)}
        self.by_name = {lk.name: lk for lk in links}
        self.host_of: dict[str, str] = {}  # address (a host's own or one of its NICs') -> host
        if topology:
            self.host_of = {str(i.address.ip): p.node for p, i in interfaces(topology).items()
                            if p.node in topology.hosts}
            self.host_of |= {str(h.address): name for name, h in topology.hosts.items()}

    def at(self, node: str, iface: str) -> Link | None:
        return self.by_port.get(Port(node, iface))

    def key(self, node: str, iface: str) -> str:
        """The link's name where the topology knows it (both ends report as one), else node:iface."""
        link = self.at(node, iface)
        return link.name if link else str(Port(node, iface))
