"""The heatmap's delays over a chosen window, and as excess over each path's floor. Pure: samples
or rows in, rows (as `Series.latest_rows` gives them) out, so the heatmap draws them alike.

Over a window each series' pushes are reduced by the statistic they carry: the median of its
p50s, the 99th percentile (nearest rank) of its p99s, the least of its mins and floors. The
excess of a delay is it less the newest floor of the same series (same source, destination and
path): what queueing adds to what the wire and the stacks cost.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence

from clockfabric.controller.dashboard.owdmap import Row
from clockfabric.controller.series.sample import Sample
from clockfabric.controller.storage.rows import dumps


def _p99(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


REDUCE: dict[str, Callable[[Sequence[float]], float]] = {
    "p50": statistics.median, "p99": _p99, "min": min, "floor": min}


def over_window(samples: Iterable[Sample], stat: str) -> list[Row]:
    """One row per series: its finite pushes in the window reduced by `stat`, at its newest push's time."""
    series: dict[tuple[str, str], tuple[int, list[float]]] = {}
    for s in samples:
        if not math.isfinite(s.value):
            continue
        key = (s.host, dumps(s.labels))
        newest, values = series.get(key, (s.t_ns, []))
        values.append(s.value)
        series[key] = (max(newest, s.t_ns), values)
    reduce = REDUCE[stat]
    return [(host, labels, t_ns, reduce(values)) for (host, labels), (t_ns, values) in series.items()]


def excess(rows: Iterable[Row], floors: Iterable[Row]) -> list[Row]:
    """Each row's delay less its series' newest floor; a series with no finite floor is left out."""
    floor = {(host, labels): value for host, labels, _t, value in floors
             if value is not None and math.isfinite(value)}
    return [(host, labels, t_ns, value - floor[(host, labels)]) for host, labels, t_ns, value in rows
            if value is not None and (host, labels) in floor]
