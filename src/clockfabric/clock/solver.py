"""Clock sync's fleet role: Solver runs in one place at a time (the reference's agent, then
the succession's; agent/services/clock.py). It keeps the latest report of every host, solves
the network effect over the whole probe graph, restates it in global time (clock/timescale.py)
and sends each host its mapping plus its neighbours' (for one-way delays). A report is ~100
bytes per pair, so 100k hosts x 10 peers is ~100 MB per window for the solver: one machine's
work. Hosts that stop reporting drop out of the graph and come back when they report again.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict

import numpy as np

from clockfabric.clock.graph import neighbours
from clockfabric.clock.health import NO_PURE, SUSTAINED_NS, SUSTAINED_S, BandBaseline, asymmetric_hosts
from clockfabric.clock.mapping import SYNCED, UNSYNCED, Mapping
from clockfabric.clock.network import Edges, Solution, solve
from clockfabric.clock.timescale import Frame, clean, ensemble, members, pivot

# the offset solve weighs each pair by its points and, past this, by the inverse square of its
# bound: a band that a queue widened says little, and must not pull the quiet hosts around it
WEIGHT_BOUND_NS = 5_000.0
FLAG_HOLD_S = 10.0  # a host found queued on every path stays out of the solve this long
# ... once it has reported for YOUNG_WINDOWS windows: a starting agent's first fits hold a few
# points, taken while its own start-up and its neighbours' load the CPU (32 agents starting on
# 2 cores: seconds of software timestamps late by hundreds of us), and their bands are wide for
# that alone; until then a wide host is left out of one solve at a time, not held out
YOUNG_WINDOWS = 4
YOUNG_S = YOUNG_WINDOWS * 2.0  # at the default 2 s window
PROBATION_S = 10.0


def _trust(bound_ns: float) -> float:
    """A pair's weight in the solve, relative to its points: 1 up to WEIGHT_BOUND_NS, then
    falling with the square of its bound."""
    return min(1.0, (WEIGHT_BOUND_NS / abs(bound_ns)) ** 2) if bound_ns else 1.0


def _limit(value: float, synced: bool) -> float | None:
    """A host's limit for its mapping (None where it has none: unsynced, or unknown)."""
    return float(value) if synced and np.isfinite(value) else None


class Solver:
    def __init__(self, hosts: list[str], reference: str, *, stale_s: float = 5.0, outlier_ns: float = 1_000.0,
                 young_s: float = YOUNG_S):
        self.hosts = sorted(hosts)
        self.index = {h: i for i, h in enumerate(self.hosts)}
        self.reference = reference
        self.stale_s = stale_s
        self.outlier_ns = outlier_ns
        self.young_s = young_s
        self.reports: dict[str, tuple[float, list]] = {}
        self.since: dict[str, float] = {}  # host -> when it began reporting (again, after going stale)
        self.last: Solution | None = None
        self._resumed = False  # `last` stands in from another solver's frame (resume): no guess for the solve
        self.rejected = 0
        self.flagged: dict[str, tuple[float, str]] = {}  # host -> (left out until, why)
        self.frame: Frame | None = None  # global time: the ensemble of the well-placed hosts' clocks
        self.wide_since: dict[str, float] = {}  # host -> since when its band is a little wide
        self.dirty: dict[str, float] = {}  # host -> when it last failed the ensemble's band test
        self.utc: dict[str, tuple[float, float, float, int]] = {}  # host -> (when, offset, rate, at its clock)
        self.bands = BandBaseline()  # how far a host's bands all widened: added to its bound

    def on_report(self, msg: dict, now: float | None = None) -> None:
        host = msg.get("host")
        if host not in self.index:
            self.rejected += 1
            return
        now = time.monotonic() if now is None else now
        last = self.reports.get(host)
        if last is None or now - last[0] > self.stale_s:
            self.since[host] = now
        self.reports[host] = (now, msg.get("edges", []))
        if isinstance(utc := msg.get("utc"), list) and len(utc) == 3:
            self.utc[host] = (now, float(utc[0]), float(utc[1]), int(utc[2]))

    def resume(self, frame: Frame) -> bool:
        """Carry on global time from the frame another solver made (the one that solved before
        fell silent): its members' offsets and drifts at its t0 stand in for a last solve, so the
        next solve continues global time on the members it still places instead of starting
        afresh (a step). False, and nothing changed, where this solver has a frame as new."""
        if self.frame is not None and self.frame.t0_ns >= frame.t0_ns:
            return False
        n = len(self.hosts)
        x, y, part = np.zeros(n), np.zeros(n), np.ones(n, dtype=int)  # part 1: not placed
        for h, _, offset, drift in frame.members:
            if (i := self.index.get(h)) is not None:
                x[i], y[i], part[i] = offset, drift, 0
        if part.all():
            return False
        unknown = np.zeros(n)  # no limit known: a member whose vote stands out is held out
        self.last = Solution(frame.t0_ns, x, y, part, 0, np.zeros(0, dtype=bool), np.zeros(0), unknown, unknown,
                             unknown, unknown, unknown, unknown)
        self.frame, self._resumed = frame, True
        return True

    def _utc(self, t0_ns: int, now: float) -> tuple[str, float, float] | None:
        """(host, its clock minus UTC at t0, its rate against UTC) from a fresh external source."""
        fresh = sorted((h, u) for h, u in self.utc.items() if now - u[0] <= self.stale_s)
        if not fresh:
            return None
        host, (_, offset, rate, at) = fresh[0]
        return host, offset + rate * (t0_ns - at), rate

    def solve(self, t0_ns: int, now: float | None = None) -> dict[str, dict]:
        """One solve over the fresh reports; the map message for each reporting host.

        Hosts queued on every path (health.asymmetric_hosts) are left out of the solve and
        named. Global time is the ensemble of the well-placed hosts (clock.timescale), carried
        on from the last solve, so no one host's load or loss moves it; every map message
        names that frame."""
        now = time.monotonic() if now is None else now
        fresh = {h: e for h, (at, e) in self.reports.items() if now - at <= self.stale_s}
        rows = [(self.index[h], self.index[p], a, b, c, w * _trust(m), m, d) for h, edges in fresh.items()
                for p, a, b, c, w, m, d in edges if p in self.index and p in fresh]
        margins: dict[str, list[float]] = defaultdict(list)
        for i, j, *_, m, _d in rows:
            margins[self.hosts[i]].append(abs(m))
            margins[self.hosts[j]].append(abs(m))
        widened = self.bands.widened({(self.hosts[i], self.hosts[j]): abs(m) for i, j, *_, m, _d in rows}, now)
        # a queue drains now and then: a flagged host stays out for FLAG_HOLD_S, or its skewed
        # edges would come back at each lull and bend the solve; a young one, for this solve only
        wide = asymmetric_hosts(margins, SUSTAINED_NS)
        self.wide_since = {h: self.wide_since.get(h, now) for h in wide}
        found = asymmetric_hosts(margins) | {h: why for h, why in wide.items()
                                             if now - self.wide_since[h] >= SUSTAINED_S}
        self.flagged |= {h: (now + FLAG_HOLD_S if now - self.since[h] >= self.young_s else now, why)
                         for h, why in found.items()}
        self.flagged = {h: f for h, f in self.flagged.items() if now <= f[0]}
        # a settled host named queued serves its probation once the name lifts, as one whose band
        # failed the ensemble's test does: a queue that lulls must not bring it back between
        # bouts (a young one's name lasts this solve alone, and so does its absence)
        self.dirty |= {h: now for h, (until, _) in self.flagged.items() if until > now}
        reasons = {h: why for h, (_, why) in self.flagged.items()}
        flagged = {self.index[h] for h in reasons}
        rows = [r for r in rows if r[0] not in flagged and r[1] not in flagged]
        reasons |= {h: NO_PURE for h in fresh if h not in margins}
        if not rows:
            return {}
        src, dst, a, b, c, w, m, d = (np.array(col) for col in zip(*rows, strict=True))
        edges = Edges(src, dst, a.astype(float), b.astype(float), c.astype(np.int64), w.astype(float),
                      m.astype(float), d.astype(float))
        solvable = np.bincount(np.concatenate([src, dst]), np.concatenate([w, w]).astype(float), len(self.hosts))
        bands = {h: statistics.median(margins[h]) for h in fresh if h in margins and h not in reasons}
        hub = pivot(self.frame, self.reference, {h: solvable[i] for h, i in self.index.items() if solvable[i] > 0},
                    bands)
        anchor = self.index[hub]
        last = None if self._resumed else self.last
        guess = last.offset_ns - last.offset_ns[anchor] if last is not None else None
        raw = solve(len(self.hosts), edges, anchor, t0_ns, outlier_ns=self.outlier_ns, guess=guess)
        # a host that left the ensemble as wide rejoins once clean for PROBATION_S; a young one's
        # band is wide for its start-up alone (YOUNG_WINDOWS), so it joins once clean
        settled = {h for h in bands if now - self.since[h] >= self.young_s}
        self.dirty |= {h: now for h in settled - clean(raw, self.index, bands)}
        shares = members(raw, self.index, bands, {h for h in bands if now - self.dirty.get(h, -1e18) >= PROBATION_S})
        sol, self.frame, held = ensemble(raw, self.index, shares, self.last, self.reference,
                                         self._utc(t0_ns, now), self.last.t0_ns if self.last is not None else None)
        self.dirty |= {h: now for h in held}  # its clock moved beyond what the solves allow
        self.last, self._resumed = sol, False
        synced = sol.synced()
        cut_off = "cut off from global time's ensemble"
        bound = {h: float(sol.bound_ns[i]) + widened.get(h, 0.0) if synced[i] else float("inf")
                 for h, i in self.index.items() if h in fresh}
        mapping = {h: Mapping(t0_ns, float(sol.offset_ns[i]), float(sol.drift[i]), bound[h], bool(synced[i]),
                              SYNCED if synced[i] else UNSYNCED,
                              "" if synced[i] else reasons.get(h, cut_off),
                              float(sol.drift_bound[i]) if synced[i] else float("inf"),
                              _limit(sol.limit_ns[i], synced[i]), _limit(sol.drift_limit[i], synced[i])).as_dict()
                   for h, i in self.index.items() if h in fresh}
        near = neighbours({h: [e[0] for e in edges if e[0] in fresh] for h, edges in fresh.items()})
        parts = len({int(sol.component[self.index[h]]) for h in fresh})
        frame = self.frame.as_dict()  # one object in every message: encoded once (wirejson.SharedParts)
        return {h: {"t": "map", "parts": parts, "frame": frame,
                    "dropped_edges": int((~sol.kept).sum()), "unsynced": reasons,
                    "hosts": {p: mapping[p] for p in (near[h] | {h}) if p in mapping}}
                for h in fresh}
