"""Latency SLA: a path's p99 one-way delay above its threshold for k windows in a row.

One window is one "owd_p99_ns" sample of the path (an agent pushes one per path per report).
The threshold is the path's override, else its pair's, else the default (config.SlaConfig).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from clockfabric.controller.config import MonitorConfig, SlaConfig
from clockfabric.controller.detectors.base import (
    DETECTORS,
    Finding,
    LinkIndex,
    PathKey,
    Streak,
    format_ns,
    owd_path,
    path_label,
)
from clockfabric.controller.storage.base import Sample


class LatencySla:
    def __init__(self, config: SlaConfig, stale_after_ns: int):
        self.config = config
        self.stale_after_ns = stale_after_ns
        self.paths: dict[PathKey, Streak] = {}
        self.recent: dict[PathKey, deque[float]] = {}  # the last k p99s, for the message

    def on_samples(self, samples: Iterable[Sample], now_ns: int) -> None:
        for s in sorted((s for s in samples if s.name == "owd_p99_ns"), key=lambda s: s.t_ns):
            key = owd_path(s)
            if key is None:
                continue
            streak = self.paths.setdefault(key, Streak(self.config.windows))
            if streak.add(s.t_ns, s.value > self.config.threshold_ns(*key)):
                self.recent.setdefault(key, deque(maxlen=self.config.windows)).append(s.value)

    def findings(self, now_ns: int) -> list[Finding]:
        for key in [k for k, st in self.paths.items() if st.last_ns < now_ns - self.stale_after_ns]:
            del self.paths[key], self.recent[key]  # no news of the path: no evidence either way
        out = []
        for key, streak in sorted(self.paths.items()):
            if not streak.open:
                continue
            src, dst, path = key
            threshold = self.config.threshold_ns(*key)
            recent = list(self.recent[key])
            out.append(Finding(
                key=f"latency_sla:{path_label(key)}", kind="latency_sla", severity=self.config.severity,
                message=(f"p99 one-way delay {src} -> {dst} on path {path} is {format_ns(recent[-1])}, "
                         f"over its {format_ns(threshold)} SLA"),
                detail={"src": src, "dst": dst, "path": path, "threshold_ns": threshold,
                        "windows": self.config.windows, "recent_p99_ns": recent, "since_ns": streak.since_ns}))
        return out


@DETECTORS.register("latency_sla", help="A path's p99 one-way delay over its SLA, k windows in a row")
def latency_sla(config: MonitorConfig, links: LinkIndex) -> LatencySla:
    return LatencySla(config.latency_sla, config.stale_after_ns)
