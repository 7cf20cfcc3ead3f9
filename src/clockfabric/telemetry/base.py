"""What every collector returns, and how the agent runs them all.

A collector (the `Collector` ABC) answers two questions: is its hardware here (`absent()`:
None, or why not), and what does it read now (`collect()`: a list of Metric). A collector for absent
hardware costs nothing after that one check; one that raises is reported down on its own
(`clockfabric_collector_up`) and takes no other collector with it.

Each collector module registers a factory `(CollectorContext) -> Collector` in `COLLECTORS`
(one module each, imported by telemetry/collectors.py). Which run is
chosen as node_exporter does: the defaults, plus `--collector NAME`, less `--no-collector NAME`.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from clockfabric.registry import Registry

if TYPE_CHECKING:
    from clockfabric.lldp import Neighbours
    from clockfabric.telemetry.link_watcher import LinkWatcher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Metric:
    """One sample, named and labelled as Prometheus will show it."""

    name: str  # full name: clockfabric_..., or a known one (node_network_..., DCGM_FI_...)
    value: float
    labels: dict[str, str] = field(default_factory=dict)
    kind: str = "gauge"  # or "counter" (its name ends in _total)
    help: str = ""


class Collector(ABC):
    name: str  # short and stable: "nic", "rdma", "nvidia_gpu", ...

    @abstractmethod
    def absent(self) -> str | None:
        """None if the hardware is here; otherwise one line on why it is not."""

    @abstractmethod
    def collect(self) -> list[Metric]:
        """Read everything now."""

    def close(self) -> None:  # noqa: B027 - optional: most hold nothing
        """Let go of what it holds: a thread, a library handle."""


@dataclass(frozen=True)
class CollectorContext:
    """What a host's collectors may need: its NICs, its link watcher, its LLDP listener."""

    rails: list[str]
    links: LinkWatcher | None = None  # None: the collector starts its own
    neighbours: Neighbours | None = None  # None: no LLDP here (not root)


CollectorFactory = Callable[[CollectorContext], Collector]
COLLECTORS: Registry[CollectorFactory] = Registry("collector", load="clockfabric.telemetry.collectors")


@dataclass
class Report:
    """One pass over all collectors: their metrics, and how each one fared."""

    metrics: list[Metric]
    status: dict[str, str]  # collector -> "ok", "not present: ...", or "error: ..."


class Collectors:
    """The collectors of one host. Absence is checked once, at start."""

    def __init__(self, collectors: Iterable[Collector]):
        self.all = list(collectors)
        self.absent = {c.name: why for c in self.all if (why := c.absent()) is not None}

    def collect(self) -> Report:
        metrics, status = [], {}
        for c in self.all:
            if c.name in self.absent:
                status[c.name] = f"not present: {self.absent[c.name]}"
                continue
            start = time.perf_counter()
            try:
                got = c.collect()
            except Exception as e:  # noqa: BLE001 - one broken collector must not take the others down
                log.warning("collector %s failed: %s", c.name, e)
                status[c.name] = f"error: {e}"
                got, up = [], 0.0
            else:
                status[c.name] = "ok"
                up = 1.0
            metrics += got
            metrics.append(Metric("clockfabric_collector_up", up, {"collector": c.name},
                                  help="1 if the collector's last read worked"))
            metrics.append(Metric("clockfabric_collector_duration_seconds", time.perf_counter() - start,
                                  {"collector": c.name}, help="How long the collector's last read took"))
        return Report(metrics, status)

    def close(self) -> None:
        for c in self.all:
            c.close()
