"""A sample as the controller reads it back from the series engine (controller.series.read)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sample:
    host: str
    t_ns: int
    name: str  # e.g. "owd_p99_ns", "rx_bytes"
    value: float
    labels: dict[str, str] = field(default_factory=dict)  # e.g. peer, path, direction, device
