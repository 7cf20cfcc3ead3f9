"""Congestion: a path's OWD (p50, or min) above the path's floor by a margin, k windows in a row.

Each host works that out for its own paths (agent.digest): every push's answer names the margin
and the statistic, and the host writes, beside the delays it writes anyway, a report (one sample
a push: a window of every one of its paths), each path's excess while it is past the margin, and
each mapped path it could not measure. A window is a host's write: a path of that host the
write names as queueing was bad in it, any other good. A path is quiet while its host reports,
it is measured, and it is not congested or on its way there. So the detectors read a few series
a host, where every path's delays were four each.

Where several paths are congested, the culprit is a link they share that no quiet path uses.
`set_path_links` says which topology links each path crosses (path discovery fills it, the lab
too). With the topology, each path's links are put in order from its source, so a hop is a
link *and a direction*: queueing one way says nothing of the other, and a quiet path the other
way does not clear a link. The links named are localization's: a greedy cover, the hop that
explains the most congested paths first, then the next for what is left. Hops no path can tell
apart are named together. Congested paths that no link explains are reported per src -> dst pair, those
with a map only once they have stayed unexplained a while: as a queue builds, paths open one
by one, and until enough have, the link they share may not stand out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from clockfabric.agent.digest import QUEUEING, REPORT, UNMEASURED
from clockfabric.controller.detectors.base import (
    DETECTORS,
    Detector,
    DetectorContext,
    Finding,
    LinkIndex,
    PathKey,
    Streak,
    format_ns,
    owd_path,
    path_label,
)
from clockfabric.controller.detectors.config import US, DetectorConfig, Keys, S, choice, duration_ns, positive_int
from clockfabric.controller.series.sample import Sample
from clockfabric.localization import PROBE, Observation, locate

STATS = ("p50", "min")
Hop = tuple[str, str]  # (link name, "from>to" nodes, or "" where the direction is unknown)


@dataclass(frozen=True)
class CongestionConfig(DetectorConfig):
    margin_ns: int = 50 * US  # OWD this far above the path's floor is queueing
    windows: int = 2
    stat: str = "p50"  # p50 sees a busy queue; min sees one that never drains
    # a congested path that has a map but that no link explains waits this long before it is
    # reported by pair: while a queue builds, paths open one by one, and the link only shows later
    unexplained_after_ns: int = 3 * S

    KEYS: ClassVar[Keys] = {"margin": ("margin_ns", duration_ns), "windows": ("windows", positive_int),
                            "stat": ("stat", choice(STATS)), "unexplained_after": ("unexplained_after_ns", duration_ns)}


@DETECTORS.register("congestion", help="Paths' delay above their floor, and the link they share")
class Congestion(Detector[CongestionConfig]):
    config_type = CongestionConfig

    def __init__(self, config: CongestionConfig, ctx: DetectorContext):
        super().__init__(config, ctx)
        self.stale_after_ns = ctx.stale_after_ns
        self.links = ctx.links
        self.reported: dict[str, int] = {}  # a host -> its newest report (window)
        self.unmeasured: dict[str, set[PathKey]] = {}  # a host -> its paths unmeasured in that report
        self.paths: dict[PathKey, Streak] = {}  # paths congested or on their way in or out
        self.excess: dict[PathKey, float] = {}  # the latest OWD above floor, of a window past the margin
        self.hops: dict[PathKey, list[Hop]] = {}
        self.unexplained: dict[PathKey, int] = {}  # a mapped congested path no link explains: since when

    def set_path_links(self, mapping: Mapping[tuple[str, str, str], list[str]], src: str | None = None) -> None:
        """The links each path crosses; with `src`, the map of that host's paths only (the rest stay)."""
        kept = {} if src is None else {k: v for k, v in self.hops.items() if k[0] != src}
        self.hops = kept | {(*key,): orient(self.links, key[0], list(names)) for key, names in mapping.items()}

    def reads(self) -> frozenset[str]:
        return frozenset({REPORT, QUEUEING, UNMEASURED})

    def asks(self) -> dict:
        return {"margin_ns": self.config.margin_ns, "stat": self.config.stat}

    def on_samples(self, samples: Iterable[Sample], now_ns: int) -> None:
        # a host's write is one window: every sample of it carries the write's time
        windows: dict[tuple[str, int], tuple[dict[PathKey, float], set[PathKey]]] = {}
        for s in samples:
            if s.name in (REPORT, QUEUEING, UNMEASURED):
                bad, unmeasured = windows.setdefault((s.host, s.t_ns), ({}, set()))
                if s.name != REPORT and (key := owd_path(s)):
                    if s.name == QUEUEING:
                        bad[key] = s.value
                    else:
                        unmeasured.add(key)
        for (host, t_ns), (bad, unmeasured) in sorted(windows.items(), key=lambda w: w[0][1]):
            if t_ns <= self.reported.get(host, -1):
                continue  # fed before (an earlier read's overlap)
            self.reported[host], self.unmeasured[host] = t_ns, unmeasured
            for key in [k for k in self.paths if k[0] == host] + [k for k in bad if k not in self.paths]:
                if key in unmeasured:
                    continue  # no window: a queue so full it drops every probe is not a quiet one
                streak = self.paths.setdefault(key, Streak(self.config.windows))
                streak.add(t_ns, key in bad)
                if key in bad:
                    self.excess[key] = bad[key]
                elif streak.quiet:  # back to quiet: nothing of it to keep
                    del self.paths[key], self.excess[key]

    def _quiet(self, now_ns: int) -> set[Hop]:
        """The hops of every quiet path: its host reports, measured it, and it is not congested."""
        horizon = now_ns - self.stale_after_ns
        return {hop for key, hops in self.hops.items()
                if self.reported.get(key[0], -1) >= horizon and key not in self.unmeasured.get(key[0], ())
                and key not in self.paths for hop in hops}

    def findings(self, now_ns: int) -> list[Finding]:
        horizon = now_ns - self.stale_after_ns
        for host in [h for h, t in self.reported.items() if t < horizon]:
            del self.reported[host], self.unmeasured[host]
        for key in [k for k in self.paths if k[0] not in self.reported]:
            del self.paths[key], self.excess[key]
        congested = sorted(k for k, st in self.paths.items() if st.open)
        if not congested:
            self.unexplained = {}
            return []
        blamed, unexplained = localize({k: self.hops.get(k, []) for k in congested}, self._quiet(now_ns))
        self.unexplained = {k: self.unexplained.get(k, now_ns) for k in unexplained}
        settled = [k for k in unexplained
                   if not self.hops.get(k) or now_ns - self.unexplained[k] >= self.config.unexplained_after_ns]
        return ([self._link_finding(group, paths) for group, paths in blamed]
                + self._pair_findings(settled))

    def _paths_detail(self, paths: list[PathKey]) -> list[dict]:
        return [{"src": s, "dst": d, "path": p, "excess_ns": self.excess[(s, d, p)]} for s, d, p in paths]

    def _link_finding(self, group: list[Hop], paths: list[PathKey]) -> Finding:
        names = [f"{name} ({src} -> {dst})" if way else name
                 for name, way in group for src, _, dst in [way.partition(">")]]
        which = names[0] if len(names) == 1 else "one of " + ", ".join(names)
        worst = max(self.excess[k] for k in paths)
        return Finding(
            key="congestion:" + "+".join(f"{name}:{way}" if way else name for name, way in group),
            kind="congestion", severity=self.config.severity,
            message=(f"congestion on {which}: {len(paths)} paths up to {format_ns(worst)} over their floor "
                     f"({', '.join(path_label(k) for k in paths)})"),
            detail={"links": [{"link": name, "direction": way.replace(">", "->") or None} for name, way in group],
                    "paths": self._paths_detail(paths)})

    def _pair_findings(self, paths: list[PathKey]) -> list[Finding]:
        pairs: dict[tuple[str, str], list[PathKey]] = {}
        for key in paths:
            pairs.setdefault(key[:2], []).append(key)
        out = []
        for (src, dst), keys in sorted(pairs.items()):
            why = "no link explains it" if all(self.hops.get(k) for k in keys) else "no path map to name a link"
            worst = max(self.excess[k] for k in keys)
            out.append(Finding(
                key=f"congestion:{src}->{dst}", kind="congestion", severity=self.config.severity,
                message=(f"congestion {src} -> {dst}: {len(keys)} paths up to {format_ns(worst)} over their floor "
                         f"({', '.join(k[2] for k in keys)}); {why}"),
                detail={"src": src, "dst": dst, "links": [], "paths": self._paths_detail(keys)}))
        return out


def orient(links: LinkIndex, src: str, names: list[str]) -> list[Hop]:
    """The path's links as hops from src, in any listed order; undirected if they do not chain."""
    hops, at, left = [], src, [links.by_name.get(n) for n in names]
    while left:
        step = next((lk for lk in left if lk and at in (lk.a.node, lk.b.node)), None)
        if step is None:
            return [(n, "") for n in names]
        nxt = step.other(at).node
        hops.append((step.name, f"{at}>{nxt}"))
        left.remove(step)
        at = nxt
    return hops


def localize(congested: dict[PathKey, list[Hop]], quiet: set[Hop]
             ) -> tuple[list[tuple[list[Hop], list[PathKey]]], list[PathKey]]:
    """Groups of hops to blame, each with the congested paths it explains; and the unexplained
    paths: localization's verdict, the quiet hops standing for the quiet paths that cross them."""
    label = {"|".join(k): k for k in congested}
    evidence = [Observation("|".join(k), tuple(hops), source=PROBE, queued=True) for k, hops in congested.items()]
    evidence.append(Observation("\0quiet", tuple(sorted(quiet)), source=PROBE, queued=False))
    verdict = locate(evidence)
    return ([(list(s.hops), sorted(label[p] for p in s.queued)) for s in verdict.suspects],
            sorted(label[p] for p in verdict.unexplained))
