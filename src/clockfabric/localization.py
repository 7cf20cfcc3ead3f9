"""Network tomography: from the excess over floor of many directed paths (the probe mesh's paths
and job flows' in-band delays), the directed links whose queueing explains it.

A queue on a link delays every packet that crosses it that way, whoever sends it; a path at its
floor met no queue. So a link that a path at its floor surely crosses is cleared, and every
queued path must cross a queued link among the ones left. The suspects are the smallest set of
links that explains every queued path (greedy set cover on the path-link incidence), ranked by
how many queued paths each explains. A queue delays every path across it alike: paths that wait
more than twice what the least of theirs does wait at a second link too, which the cover,
content with one link for them all, would hide; they are covered again. Links that every
queued path crosses alike (no path tells them apart) are named together, never one of them by
guess. The excess each explains is the non-negative least-squares fit of the queued paths'
excess on the suspects. A queued path all of whose links are cleared is unexplained; its links
where the queued paths outnumber the quiet ones by the largest share are a contested lead, no
suspect (a queue that fills and drains in turns reads quiet to a path sampled while it drained).

Only samples inside the window count: load that has gone makes no suspect. What the evidence
lacks (a path with no trace, a flow with no in-band delay, pairs the mesh misses) weakens the
verdict and is said; bad input never raises, and no link is named without a queued path on it.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import islice

Hop = tuple[str, str]  # (link name, "from>to"; "" where the way is unknown), as the topology's paths give
PROBE, INBAND = "probe", "inband"
STRENGTHS = ("located", "ambiguous", "weak", "unexplained", "healthy", "no_evidence")
SHOWN = 20  # paths listed per suspect in `row()`: the counts say the rest


@dataclass(frozen=True)
class Observation:
    """One sample of one directed path: a probe path's delay or a flow's in-band delay."""

    path: str  # names the path; samples of one path over time share it
    hops: tuple[Hop, ...] = ()  # the links it surely crosses, in order from its source; () = not traced
    excess_us: float | None = None  # its one-way delay over its floor; None: not measured
    source: str = PROBE  # PROBE or INBAND
    t_ns: int | None = None  # when it was measured; None: now
    src: str | None = None
    dst: str | None = None
    reach: tuple[Hop, ...] = ()  # every link it may cross where its route is not known; () = `hops`
    queued: bool | None = None  # the caller's own judgement; None: `excess_us` against the margins


@dataclass(frozen=True)
class Suspect:
    """A link (or links no path tells apart) whose queueing explains some of the queued paths."""

    hops: tuple[Hop, ...]
    excess_us: float | None  # the queueing it explains, fitted; None: no path measured how much
    queued: tuple[str, ...]  # for: the queued paths it explains
    against: tuple[str, ...] = ()  # paths that may cross it near their floor (their route unsure)
    cleared: tuple[tuple[Hop, str], ...] = ()  # links beside it on its paths, each with a path at floor over it

    @property
    def ambiguous(self) -> bool:
        return len(self.hops) > 1

    def row(self) -> dict:
        return {"links": [{"link": n, "direction": w.replace(">", "->") or None} for n, w in self.hops],
                "ambiguous": self.ambiguous, "excess_us": self.excess_us, "queued_paths": len(self.queued),
                "queued": list(self.queued[:SHOWN]), "against": list(self.against[:SHOWN]),
                "cleared": [{"link": n, "direction": w.replace(">", "->") or None, "by": p}
                            for (n, w), p in self.cleared[:SHOWN]]}


@dataclass(frozen=True)
class Verdict:
    strength: str  # one of STRENGTHS
    suspects: tuple[Suspect, ...] = ()
    unexplained: tuple[str, ...] = ()  # queued paths no uncleared link explains
    lacks: tuple[str, ...] = ()  # what the evidence lacks, in words
    paths: int = 0  # paths judged
    queued: int = 0
    at_floor: int = 0
    contested: tuple[Suspect, ...] = ()  # leads for the unexplained paths (_contested)

    @property
    def first(self) -> Suspect | None:
        return self.suspects[0] if self.suspects else None

    def suspect_of(self, hop: Hop) -> Suspect | None:
        """The suspect that names `hop` (the same way, where both ways are known)."""
        return next((s for s in self.suspects if any(same(hop, h) for h in s.hops)), None)

    def row(self) -> dict:
        return {"strength": self.strength, "suspects": [s.row() for s in self.suspects],
                "unexplained": list(self.unexplained[:SHOWN]), "contested": [s.row() for s in self.contested],
                "lacks": list(self.lacks),
                "paths": self.paths, "queued": self.queued, "at_floor": self.at_floor}


def same(a: Hop, b: Hop) -> bool:
    """The same link, the same way where both ways are known."""
    return a[0] == b[0] and (not a[1] or not b[1] or a[1] == b[1])


@dataclass
class _Path:
    name: str
    source: str
    src: str | None
    dst: str | None
    hops: tuple[Hop, ...] = ()
    reach: tuple[Hop, ...] = ()
    excess: list[float] = field(default_factory=list)
    judged: bool | None = None
    state: str = "none"  # queued, floor, between (neither proves), none (not measured)

    @property
    def may_cross(self) -> tuple[Hop, ...]:
        return self.reach or self.hops

    @property
    def excess_us(self) -> float | None:
        return statistics.median(self.excess) if self.excess else None


def locate(observations: Iterable[Observation], now_ns: int | None = None, window_ns: int | None = None,
           margin_us: float = 50.0, floor_us: float | None = None, hosts: Iterable[str] | None = None) -> Verdict:
    """The links whose queueing explains the queued paths among `observations` over (now - window, now].

    A path's excess is its samples' median in the window: queued above `margin_us`, at its floor
    at or under `floor_us` (half the margin unless given), neither in between. `hosts`: the ends
    the probe mesh should join, every ordered pair; None: the ends its probe paths name.
    """
    floor_us = margin_us / 2 if floor_us is None else floor_us
    paths = _gather(observations, now_ns, window_ns)
    lacks = _lacks(paths, hosts)
    for p in paths.values():
        p.state = _state(p, margin_us, floor_us)
    judged = [p for p in paths.values() if p.state != "none"]
    queued = [p for p in judged if p.state == "queued"]
    floor = [p for p in judged if p.state == "floor"]
    counts = (len(judged), len(queued), len(floor))
    if not queued:
        return Verdict("healthy" if floor else "no_evidence", (), (), tuple(lacks), *counts)
    clearing = _clearing(floor)
    candidates = {p.name: tuple(h for h in _unique(p.may_cross) if not _cleared(h, clearing)) for p in queued}
    unexplained = sorted(p.name for p in queued if not candidates[p.name])
    groups = _cover({n: c for n, c in candidates.items() if c})
    groups += _second_queues(groups, candidates, {p.name: p.excess_us for p in queued}, margin_us)
    excess = _fit(groups, candidates, {p.name: p.excess_us for p in queued})
    suspects = [_suspect(hops, covered, fitted, paths, clearing)
                for (hops, covered), fitted in zip(groups, excess, strict=True)]
    suspects.sort(key=lambda s: (-len(s.queued), -(s.excess_us or 0.0)))
    contested = _contested([p for p in queued if p.name in unexplained], queued, floor, paths, clearing)
    if not suspects:
        strength = "unexplained"
    elif lacks or unexplained:
        strength = "weak"
    else:
        strength = "ambiguous" if any(s.ambiguous for s in suspects) else "located"
    return Verdict(strength, tuple(suspects), tuple(unexplained), tuple(lacks), *counts, contested=tuple(contested))


def _contested(unexplained: list[_Path], queued: list[_Path], floor: list[_Path], paths: dict[str, _Path],
               clearing: dict[Hop, str]) -> list[Suspect]:
    """For queued paths every link of which a path at its floor clears: the clearing is wrong
    somewhere (a queue that fills and drains in turns, as TCP across a slow link makes, reads
    quiet to a path sampled while it drained). Each such path's links where the queued paths
    across them outnumber the quiet ones by the largest share; no suspect of the verdict's own,
    only a lead where it names none (its `against` says what speaks against it)."""
    if not unexplained:
        return []
    crossed: dict[Hop, list[int]] = {}
    for p in queued:
        for hop in _unique(p.may_cross):
            crossed.setdefault(hop, [0, 0])[0] += 1
    for p in floor:
        for hop in _unique(p.hops):
            crossed.setdefault(hop, [0, 0])[1] += 1

    def share(hop: Hop) -> float:
        q, f = crossed.get(hop, (0, 0))
        return q / (q + f) if q + f else 0.0
    leads = {}
    for p in unexplained:
        hops = _unique(p.may_cross)
        best = max(map(share, hops), default=0.0)
        leads[p.name] = tuple(h for h in hops if share(h) == best)
    groups = _cover(leads)
    excess = _fit(groups, leads, {p.name: p.excess_us for p in unexplained})
    out = [_suspect(hops, covered, fitted, paths, clearing)
           for (hops, covered), fitted in zip(groups, excess, strict=True)]
    return sorted(out, key=lambda s: (-len(s.queued), -(s.excess_us or 0.0)))


def _gather(observations: Iterable[Observation], now_ns: int | None, window_ns: int | None) -> dict[str, _Path]:
    since = None if now_ns is None or window_ns is None else now_ns - window_ns
    paths: dict[str, _Path] = {}
    for o in sorted((o for o in observations if isinstance(o, Observation)), key=lambda o: o.t_ns or 0):
        if since is not None and o.t_ns is not None and o.t_ns <= since:
            continue  # gone from the window: its load says nothing of now
        p = paths.setdefault(str(o.path), _Path(str(o.path), o.source, o.src, o.dst))
        if o.hops or o.reach:  # the latest trace wins; an untraced sample keeps the last one's
            p.hops, p.reach = _hops(o.hops), _hops(o.reach)
        if _number(o.excess_us):
            p.excess.append(float(o.excess_us))  # type: ignore[arg-type]
        if o.queued is not None:
            p.judged = bool(o.queued)
    return paths


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and value == value and abs(value) != float("inf")


def _hops(hops: object) -> tuple[Hop, ...]:
    """Only well-formed hops: a malformed one is no evidence."""
    try:
        return tuple((str(h[0]), str(h[1])) for h in hops if len(h) == 2 and h[0])  # type: ignore[attr-defined]
    except TypeError:
        return ()


def _unique(hops: tuple[Hop, ...]) -> tuple[Hop, ...]:
    return tuple(dict.fromkeys(hops))


def _state(p: _Path, margin_us: float, floor_us: float) -> str:
    if p.judged is not None:
        return "queued" if p.judged else "floor"
    x = p.excess_us
    if x is None:
        return "none"
    return "queued" if x > margin_us else "floor" if x <= floor_us else "between"


def _lacks(paths: dict[str, _Path], hosts: Iterable[str] | None) -> list[str]:
    out = []
    untraced = [p for p in paths.values() if not p.may_cross]
    if untraced:
        out.append(f"{len(untraced)} paths with no trace of the links they cross ({_few(untraced)})")
    silent = [p for p in paths.values() if p.judged is None and not p.excess]
    flows = [p for p in silent if p.source == INBAND]
    if flows:
        out.append(f"{len(flows)} flows with no in-band delay ({_few(flows)})")
    if len(silent) > len(flows):
        out.append(f"{len(silent) - len(flows)} paths with no delay in the window ({_few(silent)})")
    probes = {(p.src, p.dst) for p in paths.values() if p.source == PROBE and p.src and p.dst}
    ends = sorted(set(hosts) if hosts is not None else {e for pair in probes for e in pair if e})
    # counted, not listed: at a fleet's size the pairs are millions, the probes a few a host
    inside = set(ends)
    missing = len(ends) * (len(ends) - 1) - sum(1 for a, b in probes if a != b and a in inside and b in inside)
    if missing:
        first = islice(((a, b) for a in ends for b in ends if a != b and (a, b) not in probes), 5)
        shown = ", ".join(f"{a}->{b}" for a, b in first)
        out.append(f"the probe mesh misses {missing} of {len(ends) * (len(ends) - 1)} host pairs ({shown}"
                   f"{', ...' if missing > 5 else ''})")
    return out


def _few(paths: list[_Path]) -> str:
    names = sorted(p.name for p in paths)
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def _clearing(floor: list[_Path]) -> dict[Hop, str]:
    """Each hop a path at its floor surely crosses, with the first such path (its route unsure: none)."""
    out: dict[Hop, str] = {}
    for p in sorted(floor, key=lambda p: p.name):
        for hop in p.hops:
            out.setdefault(hop, p.name)
    return out


def _cleared_by(hop: Hop, clearing: dict[Hop, str]) -> str | None:
    """The path that proves `hop` quiet: one at floor over it that way, or over the link either way
    where a way is unknown (a quiet path of unknown way clears both)."""
    name, way = hop
    if hop in clearing:
        return clearing[hop]
    if (name, "") in clearing:
        return clearing[(name, "")]
    if not way:
        return next((p for (n, _), p in clearing.items() if n == name), None)
    return None


def _cleared(hop: Hop, clearing: dict[Hop, str]) -> bool:
    return _cleared_by(hop, clearing) is not None


def _cover(candidates: dict[str, tuple[Hop, ...]]) -> list[tuple[tuple[Hop, ...], tuple[str, ...]]]:
    """Greedy set cover: the hops that explain the most queued paths left, then the next for the
    rest. Hops crossed by exactly the same queued paths are one group: no path tells them apart."""
    covers: dict[Hop, set[str]] = {}
    order: dict[Hop, int] = {}
    for path, hops in candidates.items():
        for i, hop in enumerate(hops):
            covers.setdefault(hop, set()).add(path)
            order[hop] = min(order.get(hop, i), i)
    groups: dict[frozenset[str], list[Hop]] = {}
    for hop, paths in covers.items():
        groups.setdefault(frozenset(paths), []).append(hop)
    left = set(candidates)
    chosen = []
    while left and groups:
        best = max(groups, key=lambda g: (len(g & left), len(g), sorted(g)))
        if not best & left:
            break
        named = groups.pop(best)
        chosen.append((tuple(sorted(named, key=lambda h: (order[h], h))), tuple(sorted(best))))
        left -= best
    return chosen


def _second_queues(groups: list[tuple[tuple[Hop, ...], tuple[str, ...]]], candidates: dict[str, tuple[Hop, ...]],
                   excess: dict[str, float | None], margin_us: float) -> list[tuple[tuple[Hop, ...], tuple[str, ...]]]:
    """Queues the cover hid: a queue delays every path across it alike, so it explains no more than
    the least of its paths waits; paths that wait that much again and more (beyond the margin) wait
    at a second link too. That link is among the ones they cross and no other queued path does
    without waiting as much: covered again among those. (A host's uplink queued by its own bulk
    flows explains every path it sends; a slow link behind it, crossed only by its paths, shows
    only in what some of them wait beyond it.)"""
    chosen = {h for hops, _ in groups for h in hops}
    deep: dict[str, tuple[Hop, ...]] = {}
    for _, covered in groups:
        waits = {p: x for p in covered if (x := excess.get(p)) is not None}
        if len(waits) < 2:
            continue
        least = min(waits.values())
        deep |= {p: candidates[p] for p, x in waits.items() if x > 2 * least + margin_us}
    if not deep:
        return []
    shallow = {h for p, hops in candidates.items() if p not in deep for h in hops}
    left = {p: tuple(h for h in hops if h not in chosen and h not in shallow) for p, hops in deep.items()}
    return _cover({p: hops for p, hops in left.items() if hops})


def _fit(groups: list[tuple[tuple[Hop, ...], tuple[str, ...]]], candidates: dict[str, tuple[Hop, ...]],
         excess: dict[str, float | None]) -> list[float | None]:
    """Each group's queueing: non-negative least squares of the queued paths' excess on the groups
    their candidates cross; each group's paths' median where the fit cannot be made."""
    rows = [p for p in sorted(candidates) if excess.get(p) is not None and candidates[p]]
    fallback = [_median([excess.get(p) for p in covered]) for _, covered in groups]
    if not rows or not groups:
        return fallback
    try:
        import numpy as np
        from scipy.optimize import nnls

        a = np.array([[1.0 if set(candidates[p]) & set(hops) else 0.0 for hops, _ in groups] for p in rows])
        x, _ = nnls(a, np.array([excess[p] for p in rows], dtype=float))
    except (ImportError, ValueError, RuntimeError):
        return fallback
    return [float(v) if any(excess.get(p) is not None for p in covered) else None
            for v, (_, covered) in zip(x, groups, strict=True)]


def _median(values: list[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def _suspect(hops: tuple[Hop, ...], covered: tuple[str, ...], fitted: float | None, paths: dict[str, _Path],
             clearing: dict[Hop, str]) -> Suspect:
    on = [p for p in paths.values() if any(same(h, x) for h in hops for x in p.may_cross)]
    against = sorted(p.name for p in on if p.state in ("floor", "between") and p.name not in covered)
    beside: dict[Hop, str] = {}
    for name in covered:
        for hop in paths[name].may_cross:
            by = _cleared_by(hop, clearing)
            if by is not None and hop not in hops:
                beside.setdefault(hop, by)
    return Suspect(hops, fitted, covered, tuple(against), tuple(sorted(beside.items())))
