"""Congestion: a path's OWD (p50, or min) above the path's floor by a margin, k windows in a row.

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
        self.floors: dict[PathKey, tuple[int, float]] = {}  # the latest floor: (t_ns, value)
        self.paths: dict[PathKey, Streak] = {}
        self.excess: dict[PathKey, float] = {}  # the latest OWD above floor
        self.hops: dict[PathKey, list[Hop]] = {}
        self.unexplained: dict[PathKey, int] = {}  # a mapped congested path no link explains: since when

    def set_path_links(self, mapping: Mapping[tuple[str, str, str], list[str]], src: str | None = None) -> None:
        """The links each path crosses; with `src`, the map of that host's paths only (the rest stay)."""
        kept = {} if src is None else {k: v for k, v in self.hops.items() if k[0] != src}
        self.hops = kept | {(*key,): orient(self.links, key[0], list(names)) for key, names in mapping.items()}

    def reads(self) -> frozenset[str]:
        return frozenset({"owd_floor_ns", f"owd_{self.config.stat}_ns"})

    def on_samples(self, samples: Iterable[Sample], now_ns: int) -> None:
        samples = list(samples)
        for s in samples:  # floors first: a report's floor may come after its p50 in the batch
            if s.name == "owd_floor_ns" and (key := owd_path(s)) and s.t_ns >= self.floors.get(key, (0, 0))[0]:
                self.floors[key] = (s.t_ns, s.value)
        stat = f"owd_{self.config.stat}_ns"
        for s in sorted((s for s in samples if s.name == stat), key=lambda s: s.t_ns):
            key = owd_path(s)
            if key is None or key not in self.floors:
                continue
            excess = s.value - self.floors[key][1]
            if self.paths.setdefault(key, Streak(self.config.windows)).add(s.t_ns, excess > self.config.margin_ns):
                self.excess[key] = excess

    def findings(self, now_ns: int) -> list[Finding]:
        horizon = now_ns - self.stale_after_ns
        for key in [k for k, st in self.paths.items() if st.last_ns < horizon]:
            del self.paths[key], self.excess[key]
        self.floors = {k: f for k, f in self.floors.items() if f[0] >= horizon}
        congested = sorted(k for k, st in self.paths.items() if st.open)
        quiet = {hop for k, st in self.paths.items() if st.quiet for hop in self.hops.get(k, ())}
        blamed, unexplained = localize({k: self.hops.get(k, []) for k in congested}, quiet)
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
