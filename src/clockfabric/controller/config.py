"""The monitor's settings: which detectors run and their thresholds, from a YAML file.

Every key is optional; a missing file section keeps the defaults below. docs/monitoring.md
describes the format. Bad input raises one ClockfabricError line naming the file and the key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path as FilePath
from typing import Any

from clockfabric.errors import ClockfabricError
from clockfabric.units import parse_duration
from clockfabric.yamlfile import read_yaml

US = 1_000
MS = 1_000_000
SECOND = 1_000_000_000
S = 1_000_000_000
SEVERITIES = ("warning", "critical")
CONGESTION_STATS = ("p50", "min")

Overrides = dict[tuple[str, str, str | None], int]  # (src, dst, path or None for every path) -> p99 ns


@dataclass(frozen=True)
class LinkDownConfig:
    enabled: bool = True
    severity: str = "critical"


@dataclass(frozen=True)
class FlappingConfig:
    enabled: bool = True
    severity: str = "warning"
    count: int = 3  # transitions (downs and ups) ...
    window_ns: int = 60 * S  # ... within this long; quiet this long resolves


@dataclass(frozen=True)
class SlaConfig:
    enabled: bool = True
    severity: str = "warning"
    p99_ns: int = 1 * MS
    windows: int = 3  # this many bad windows in a row open the alert, as many good ones resolve it
    overrides: Overrides = field(default_factory=dict)

    def threshold_ns(self, src: str, dst: str, path: str) -> int:
        """The most specific threshold: the path's, else the pair's, else the default."""
        o = self.overrides
        return o.get((src, dst, path), o.get((src, dst, None), self.p99_ns))


@dataclass(frozen=True)
class CongestionConfig:
    enabled: bool = True
    severity: str = "warning"
    margin_ns: int = 50 * US  # OWD this far above the path's floor is queueing
    windows: int = 2
    stat: str = "p50"  # p50 sees a busy queue; min sees one that never drains
    # a congested path that has a map but that no link explains waits this long before it is
    # reported by pair: while a queue builds, paths open one by one, and the link only shows later
    unexplained_after_ns: int = 3 * SECOND


@dataclass(frozen=True)
class DriftConfig:
    enabled: bool = True
    severity: str = "warning"


@dataclass(frozen=True)
class SlowFlowConfig:
    enabled: bool = True
    severity: str = "warning"
    windows: int = 3  # judgements (one a tick) in a row that open or close a flow's alert
    recent_ns: int = 10 * S  # each judgement reads this much of the flows' latest readings


@dataclass(frozen=True)
class OwdMismatchConfig:
    enabled: bool = True
    severity: str = "warning"
    windows: int = 3  # judgements (one a tick) in a row that open or close a flow's alert
    recent_ns: int = 10 * S  # each judgement reads this much of the flows' latest in-band readings


@dataclass(frozen=True)
class MonitorConfig:
    stale_after_ns: int = 60 * S  # a path with no sample this long is forgotten (its alerts resolve)
    link_down: LinkDownConfig = LinkDownConfig()
    flapping: FlappingConfig = FlappingConfig()
    latency_sla: SlaConfig = SlaConfig()
    congestion: CongestionConfig = CongestionConfig()
    topology_drift: DriftConfig = DriftConfig()
    slow_flow: SlowFlowConfig = SlowFlowConfig()
    owd_mismatch: OwdMismatchConfig = OwdMismatchConfig()


class _Problem(Exception):
    """One thing wrong with the file, naming the key; parse_config adds the file's name."""


def load_config(path: str | FilePath) -> MonitorConfig:
    path = FilePath(path)
    data = read_yaml(path, "monitor config")
    return parse_config(data, str(path))


def parse_config(data: Any, source: str = "monitor config") -> MonitorConfig:
    try:
        return _parse(data)
    except _Problem as e:
        raise ClockfabricError(f"{source}: {e}") from None


# ---- value parsers: each takes (value, where) and raises _Problem naming `where` -------------

def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise _Problem(f"{where} must be true or false")
    return value


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _Problem(f"{where} must be a positive integer")
    return value


def _duration_ns(value: Any, where: str) -> int:
    if isinstance(value, bool) or value is None:
        raise _Problem(f"{where} must be a duration like 60s, 1ms or 50us")
    try:
        ns = round(parse_duration(value) * S)
    except ValueError as e:
        raise _Problem(f"{where}: {e}") from None
    if ns <= 0:
        raise _Problem(f"{where} must be above zero")
    return ns


def _choice(options: tuple[str, ...]) -> Callable[[Any, str], str]:
    def parse(value: Any, where: str) -> str:
        if value not in options:
            raise _Problem(f"{where} must be one of {', '.join(options)}, not {value!r}")
        return value
    return parse


def _overrides(value: Any, where: str) -> Overrides:
    if not isinstance(value, list):
        raise _Problem(f"{where} must be a list of {{src, dst, path (optional), p99}}")
    out: Overrides = {}
    for i, item in enumerate(value):
        at = f"{where}[{i}]"
        _mapping(item, at, {"src", "dst", "path", "p99"})
        missing = [k for k in ("src", "dst", "p99") if k not in item]
        if missing:
            raise _Problem(f"{at} needs {', '.join(missing)}")
        ends = [item["src"], item["dst"], item.get("path", "")]
        if not all(isinstance(x, str | int) and not isinstance(x, bool) for x in ends):
            raise _Problem(f"{at}: src, dst and path must be names")
        key = (str(item["src"]), str(item["dst"]), str(item["path"]) if "path" in item else None)
        if key in out:
            raise _Problem(f"{at} repeats an earlier override for the same src, dst and path")
        out[key] = _duration_ns(item["p99"], f"{at}.p99")
    return out


def _mapping(value: Any, where: str, known: set[str]) -> None:
    if not isinstance(value, dict):
        raise _Problem(f"{where} must be a mapping")
    unknown = sorted(str(k) for k in value if k not in known)
    if unknown:
        raise _Problem(f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(sorted(known))}")


# ---- the file's shape ---------------------------------------------------------------------

_COMMON = {"enabled": ("enabled", _bool), "severity": ("severity", _choice(SEVERITIES))}
_SECTIONS: dict[str, dict[str, tuple[str, Callable[[Any, str], Any]]]] = {
    "link_down": {},
    "flapping": {"count": ("count", _positive_int), "window": ("window_ns", _duration_ns)},
    "latency_sla": {"p99": ("p99_ns", _duration_ns), "windows": ("windows", _positive_int),
                    "overrides": ("overrides", _overrides)},
    "congestion": {"margin": ("margin_ns", _duration_ns), "windows": ("windows", _positive_int),
                   "stat": ("stat", _choice(CONGESTION_STATS)),
                   "unexplained_after": ("unexplained_after_ns", _duration_ns)},
    "topology_drift": {},
    "slow_flow": {"windows": ("windows", _positive_int), "recent": ("recent_ns", _duration_ns)},
    "owd_mismatch": {"windows": ("windows", _positive_int), "recent": ("recent_ns", _duration_ns)},
}


def _parse(data: Any) -> MonitorConfig:
    config = MonitorConfig()
    if data is None:  # an empty file: every default
        return config
    if not isinstance(data, dict):
        raise _Problem(f"must be a mapping with keys {', '.join(['stale_after', *_SECTIONS])}")
    _mapping(data, "top level", {"stale_after", *_SECTIONS})
    if "stale_after" in data:
        config = replace(config, stale_after_ns=_duration_ns(data["stale_after"], "stale_after"))
    for name, keys in _SECTIONS.items():
        if name not in data or data[name] is None:
            continue
        section = data[name]
        spec = {**_COMMON, **keys}
        _mapping(section, name, set(spec))
        values = {attr: parse(section[key], f"{name}.{key}") for key, (attr, parse) in spec.items() if key in section}
        config = replace(config, **{name: replace(getattr(config, name), **values)})
    return config

