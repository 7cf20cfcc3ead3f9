"""What the detectors share: their ABC and registry, the finding each reports, OWD sample keys,
streaks, link names.

A detector is a `Detector` subclass, registered in `DETECTORS` under the name of its config
section; the class is the factory: `(its config, DetectorContext) -> Detector`. It says what
should be open now (`findings`), fed by whichever of on_events / on_samples / on_neighbours /
set_path_links it needs (the rest do nothing); DetectorSet calls them all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from clockfabric.controller.detectors.config import DetectorConfig
from clockfabric.controller.series.sample import Sample
from clockfabric.controller.storage.base import Event
from clockfabric.registry import Registry
from clockfabric.topology.addressing import interfaces
from clockfabric.topology.model import Link, Port, Topology

PathKey = tuple[str, str, str]  # (src host, dst host, path label): one direction of one path
C = TypeVar("C", bound=DetectorConfig)


@dataclass(frozen=True)
class Finding:
    """An alert that should be open now. `key` is stable while the problem lasts."""

    key: str
    kind: str
    severity: str
    message: str
    detail: dict = field(default_factory=dict)  # JSON-safe: it goes to storage and the API as is


@dataclass(frozen=True)
class DetectorContext:
    """What any detector may read besides its own config."""

    links: LinkIndex
    stale_after_ns: int  # a path with no sample this long is forgotten (its alerts resolve)


class Detector(ABC, Generic[C]):
    """One kind of alert: fed what agents push, it says which findings should be open now."""

    config_type: ClassVar[type[DetectorConfig]]  # its section of the monitor config
    needs_topology: ClassVar[bool] = False  # compares with the topology: off without one

    def __init__(self, config: C, ctx: DetectorContext):
        self.config = config

    @abstractmethod
    def findings(self, now_ns: int) -> list[Finding]:
        """What should be open now."""

    def on_events(self, events: Iterable[Event], now_ns: int) -> None:  # noqa: B027 - optional
        """Events agents pushed."""

    def on_samples(self, samples: Iterable[Sample], now_ns: int) -> None:  # noqa: B027 - optional
        """Samples agents pushed (OWD by path, link state, LLDP neighbours, job flows)."""

    def reads(self) -> frozenset[str]:
        """The sample names on_samples uses: what the controller reads from the engine each tick for it."""
        return frozenset()

    def asks(self) -> dict:
        """What hosts should work out for it and write (agent.digest), sent to them in each push's
        answer; {}: nothing."""
        return {}

    def on_neighbours(self, host: str, nic: str, seen: str | None, now_ns: int) -> None:  # noqa: B027 - optional
        """The neighbour LLDP heard on `host`'s `nic` (None: none)."""

    def set_path_links(self, mapping: Mapping[PathKey, list[str]],  # noqa: B027 - optional
                       src: str | None = None) -> None:
        """The topology links each path crosses; with `src`, that host's paths only."""


DETECTORS: Registry[type[Detector[Any]]] = Registry("detector", load="clockfabric.controller.detectors")


def owd_path(sample: Sample) -> PathKey | None:
    """The path an OWD sample measures, (src, dst, path) as its sender wrote it; None where its
    labels do not say (the reader, controller/series/read.py, gives only the sender's view)."""
    labels = sample.labels
    if not labels.get("dst") or "path" not in labels:
        return None
    return labels.get("src", sample.host), labels["dst"], labels["path"]


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
        if min(readings[key], default=since_ns) >= since_ns:
            continue  # nothing older: most keys, each tick
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
