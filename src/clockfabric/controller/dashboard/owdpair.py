"""One pair's one-way delays over time, both directions and every path, as the heatmap's cell
opens them: each (direction, path) a line on one time axis of one-second points. Pure: samples in,
a dict out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from clockfabric.controller.series.sample import Sample

BUCKET_NS = 10**9


def pair_series(samples: Iterable[Sample], src: str, dst: str, since_ns: int, now_ns: int,
                bucket_ns: int = BUCKET_NS) -> dict:
    """{src, dst, since_ns, now_ns, t_ns: [bucket starts], lines: [{from, to, path, ns: [...]}]}: a line
    per direction and path, null where no push landed in a bucket (the newest where two did)."""
    wanted = {(src, dst), (dst, src)}
    readings: dict[tuple[str, str, str], dict[int, tuple[int, float]]] = {}
    for s in samples:
        ends = (s.labels.get("src", s.host), s.labels.get("dst", ""))
        if ends not in wanted or not since_ns <= s.t_ns < now_ns or not math.isfinite(s.value):
            continue
        per = readings.setdefault((*ends, s.labels.get("path", "")), {})
        bucket = s.t_ns // bucket_ns
        if bucket not in per or per[bucket][0] <= s.t_ns:
            per[bucket] = (s.t_ns, s.value)
    buckets = sorted({b for per in readings.values() for b in per})
    lines = [{"from": a, "to": b, "path": path, "ns": [per[k][1] if k in per else None for k in buckets]}
             for (a, b, path), per in sorted(readings.items())]
    return {"src": src, "dst": dst, "since_ns": since_ns, "now_ns": now_ns,
            "t_ns": [b * bucket_ns for b in buckets], "lines": lines}
