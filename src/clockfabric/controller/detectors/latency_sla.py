"""Latency SLA: a path's p99 one-way delay above its threshold for k windows in a row.

One window is one "owd_p99_ns" sample of the path (an agent pushes one per path per report).
The threshold is the path's override, else its pair's, else the default (SlaConfig).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from clockfabric.controller.detectors.base import (
    DETECTORS,
    Detector,
    DetectorContext,
    Finding,
    PathKey,
    Streak,
    format_ns,
    owd_path,
    path_label,
)
from clockfabric.controller.detectors.config import (
    MS,
    DetectorConfig,
    Keys,
    Problem,
    duration_ns,
    mapping,
    positive_int,
)
from clockfabric.controller.series.sample import Sample

Overrides = dict[tuple[str, str, str | None], int]  # (src, dst, path or None for every path) -> p99 ns


def parse_overrides(value: Any, where: str) -> Overrides:
    if not isinstance(value, list):
        raise Problem(f"{where} must be a list of {{src, dst, path (optional), p99}}")
    out: Overrides = {}
    for i, item in enumerate(value):
        at = f"{where}[{i}]"
        mapping(item, at, {"src", "dst", "path", "p99"})
        missing = [k for k in ("src", "dst", "p99") if k not in item]
        if missing:
            raise Problem(f"{at} needs {', '.join(missing)}")
        ends = [item["src"], item["dst"], item.get("path", "")]
        if not all(isinstance(x, str | int) and not isinstance(x, bool) for x in ends):
            raise Problem(f"{at}: src, dst and path must be names")
        key = (str(item["src"]), str(item["dst"]), str(item["path"]) if "path" in item else None)
        if key in out:
            raise Problem(f"{at} repeats an earlier override for the same src, dst and path")
        out[key] = duration_ns(item["p99"], f"{at}.p99")
    return out


@dataclass(frozen=True)
class SlaConfig(DetectorConfig):
    p99_ns: int = 1 * MS
    windows: int = 3  # this many bad windows in a row open the alert, as many good ones resolve it
    overrides: Overrides = field(default_factory=dict)

    KEYS: ClassVar[Keys] = {"p99": ("p99_ns", duration_ns), "windows": ("windows", positive_int),
                            "overrides": ("overrides", parse_overrides)}

    def threshold_ns(self, src: str, dst: str, path: str) -> int:
        """The most specific threshold: the path's, else the pair's, else the default."""
        o = self.overrides
        return o.get((src, dst, path), o.get((src, dst, None), self.p99_ns))


@DETECTORS.register("latency_sla", help="A path's p99 one-way delay over its SLA, k windows in a row")
class LatencySla(Detector[SlaConfig]):
    config_type = SlaConfig

    def __init__(self, config: SlaConfig, ctx: DetectorContext):
        super().__init__(config, ctx)
        self.stale_after_ns = ctx.stale_after_ns
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
