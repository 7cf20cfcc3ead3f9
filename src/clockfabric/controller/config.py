"""The monitor's settings, from a YAML file: how long a silent path is remembered, and each
detector's section (which detectors run, and their thresholds).

Every key is optional; a missing section keeps its detector's defaults. A section's keys and
defaults are its detector's (its `DetectorConfig` subclass, in its module); this reads the
file's top level into a MonitorConfig and hands each section to its detector's config class.
docs/monitoring.md describes the format. Bad input raises one ClockfabricError line naming the
file and the key.
"""

from __future__ import annotations

from pathlib import Path as FilePath
from typing import Any

from clockfabric.controller.detectors.config import Problem, duration_ns, mapping
from clockfabric.controller.detectors.detector_set import MonitorConfig, config_types
from clockfabric.errors import ClockfabricError
from clockfabric.yamlfile import read_yaml


def load_config(path: str | FilePath) -> MonitorConfig:
    path = FilePath(path)
    data = read_yaml(path, "monitor config")
    return parse_config(data, str(path))


def parse_config(data: Any, source: str = "monitor config") -> MonitorConfig:
    try:
        return _parse(data)
    except Problem as e:
        raise ClockfabricError(f"{source}: {e}") from None


def _parse(data: Any) -> MonitorConfig:
    if data is None:  # an empty file: every default
        return MonitorConfig()
    sections = config_types()
    if not isinstance(data, dict):
        raise Problem(f"must be a mapping with keys {', '.join(['stale_after', *sections])}")
    if "latency_sla" in data:
        raise Problem("latency_sla: the latency SLA is the rule ClockfabricLatencySLABreach now "
                      "(deploy/prometheus/clockfabric-rules.yml; docs/alerts.md): remove the section")
    mapping(data, "top level", {"stale_after", *sections})
    stale_after_ns = duration_ns(data["stale_after"], "stale_after") if "stale_after" in data else None
    detectors = {name: kind.parse(data.get(name), name) for name, kind in sections.items()}
    if stale_after_ns is None:
        return MonitorConfig(detectors=detectors)
    return MonitorConfig(stale_after_ns, detectors)


__all__ = ["MonitorConfig", "load_config", "parse_config"]
