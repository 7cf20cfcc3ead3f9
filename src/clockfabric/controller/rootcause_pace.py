"""A job's pace over the window, apart from judging its flows: its sent throughput over time and
how far it dropped, and the sending hosts the controller hears late. Pure, as rootcause."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from clockfabric.controller.rootcause import Flow, FlowStats


def late_hosts(stats: list[FlowStats], now_ns: int, gaps: float = 2.0) -> list[dict]:
    """The job's sending hosts the controller hears late: readings spaced `gaps` times the
    job's usual spacing or more, or a newest reading older than the freshest host's by that
    many usual gaps (their pushes held up on the way, as when they cross the link at fault). Their
    flows are judged on fewer, older readings than the rest. Against the job's own hosts, so any
    push cadence reads the same; a host with one reading has no spacing of its own."""
    heard: dict[str, list[int]] = {}
    for s in stats:
        heard.setdefault(s.flow.host, []).extend(p.t_ns for p in s.flow.points)
    times = {h: sorted(set(t)) for h, t in heard.items() if t}
    spacing = {h: statistics.median(b - a for a, b in zip(t, t[1:], strict=False)) for h, t in times.items()
               if len(t) > 1}
    if len(times) < 2 or not spacing:
        return []
    usual = min(spacing.values())
    freshest = max(t[-1] for t in times.values())
    out = []
    for host, t in sorted(times.items()):
        sparse = spacing.get(host, 0) >= gaps * usual
        stale = freshest - t[-1] >= gaps * usual
        if sparse or stale:
            gap = spacing.get(host)
            out.append({"host": host, "readings": len(t), "spacing_s": None if gap is None else round(gap / 1e9, 2),
                        "usual_spacing_s": round(usual / 1e9, 2), "newest_age_s": round((now_ns - t[-1]) / 1e9, 2)})
    return out


def throughput(flows: Iterable[Flow], bucket_ns: int = 10**9) -> list[tuple[int, float]]:
    """The job's sent rate over time: each bucket's flows summed (a flow's readings in it averaged)."""
    per: dict[int, dict[str, list[float]]] = {}
    for f in flows:
        for p in f.points:
            if p.tx_bps is not None:
                per.setdefault(p.t_ns // bucket_ns, {}).setdefault(f"{f.host}|{f.flow}", []).append(p.tx_bps)
    return [(b * bucket_ns, sum(statistics.fmean(v) for v in by_flow.values())) for b, by_flow in sorted(per.items())]


def throughput_drop(series: list[tuple[int, float]]) -> float | None:
    """The last third's median rate as a share of the first third's; None with too few points."""
    if len(series) < 3:
        return None
    third = len(series) // 3
    before = statistics.median(v for _, v in series[:third])
    after = statistics.median(v for _, v in series[-third:])
    return after / before if before > 0 else None
