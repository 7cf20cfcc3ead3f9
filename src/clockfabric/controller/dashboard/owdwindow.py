"""The heatmap's delays over a chosen window, and as excess over each path's floor. Pure: samples
or delays in, delays (as `Series.delays` gives them) out, so the heatmap draws them alike.

Over a window each series' pushes are reduced by the statistic they carry: the median of its
p50s, the 99th percentile (nearest rank) of its p99s, the least of its mins and floors. The
excess of a delay is it less the newest floor of the same series (same source, destination and
path): what queueing adds to what the wire and the stacks cost.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence

from clockfabric.controller.dashboard.owdmap import Delay
from clockfabric.controller.series.sample import Sample


def _p99(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


REDUCE: dict[str, Callable[[Sequence[float]], float]] = {
    "p50": statistics.median, "p99": _p99, "min": min, "floor": min}


def over_window(samples: Iterable[Sample], stat: str) -> list[Delay]:
    """One delay per path: its finite pushes in the window reduced by `stat`."""
    series: dict[tuple[str, str, str], list[float]] = {}
    for s in samples:
        dst = s.labels.get("dst")
        if dst is None or not math.isfinite(s.value):
            continue
        series.setdefault((s.labels.get("src") or s.host, dst, s.labels.get("path", "")), []).append(s.value)
    reduce = REDUCE[stat]
    return [(src, dst, path, reduce(values)) for (src, dst, path), values in series.items()]


def excess(delays: Iterable[Delay], floors: Iterable[Delay]) -> list[Delay]:
    """Each delay less its path's newest floor; a path with no finite floor is left out."""
    floor = {(src, dst, path): ns for src, dst, path, ns in floors if math.isfinite(ns)}
    return [(src, dst, path, ns - floor[(src, dst, path)]) for src, dst, path, ns in delays
            if (src, dst, path) in floor]
