"""Global time: an ensemble of the fleet's well-placed clocks, as TAI is of many clocks.

At a solve's epoch t0, global time is the weighted mean of its members' clocks, each read
through its own mapping: g = sum_i w_i M_i(c_i), over the members whose reading is near the
median of the readings (within VOTE_NS, or 4 spreads), as the solve's vote counts them. So a
member whose clock steps, or runs away, between two solves is out of global time from that
moment, not at the next solve: no one member can bend it. Members are the hosts whose paths are pure
(their typical band no wider than the fleet's, by MEMBER_SLACK_NS), not named unsyncable, with
a sane rate; a member weighs 1 / its typical band squared, no member above MAX_SHARE.

The solve itself is anchored on one host, the pivot; the ensemble then sets the pivot's offset
and drift (X, Y) so that, over the members the last solve placed too, the new offsets match the
last ones extrapolated, and the new drifts the last ones, on a weighted mean. So a member
that joins or leaves does not move global time, and one whose vote stands out (its clock
stepped, or a queue bent it) is left out of that solve's vote: a member whose vote is kept
moves global time by at most its share of the vote tolerance (VOTE_NS, or the votes' spread).

The first solve has nothing to continue: global time starts on the reference's clock if the
reference is a member, else on the members' weighted mean. Only a solve that shares no placed
host with the last one starts afresh (a step).

A host with an external time source (UTC) reports its clock minus UTC and its rate against it;
global time is steered to it slowly, through its rate only (toward UTC's rate plus the offset
over UTC_TAU_S, changed by at most MAX_RATE_STEP a second), never anchored on it, never stepped.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

import numpy as np

from clockfabric.clock.mapping import Mapping
from clockfabric.clock.network import BOUND_Z, Solution

MAX_MEMBERS = 32  # the best-weighted; more adds little and every map message carries them
MAX_SHARE = 0.35  # no member weighs more: two or three members must agree to move global time
MEMBER_SLACK_NS = 2_000.0  # a member's typical band is within twice the fleet's plus this
MEMBER_MAX_DRIFT = 200e-6  # off the fleet's median rate by more: a broken oscillator
VOTE_NS, VOTE_DRIFT = 300.0, 300e-9  # a member's vote within this of the median counts, or 4 spreads
UTC_TAU_S = 100.0  # the offset to UTC is steered out with this time constant ...
# ... by a rate that changes by at most this a second: a mapping a second old is then off the
# newest by 50 ns at most, alike on every host
MAX_RATE_STEP = 50e-9


@dataclass(frozen=True)
class Frame:
    t0_ns: int
    members: tuple[tuple[str, float, float, float], ...]  # (host, weight share, offset_ns, drift) at t0
    utc_ns: float | None = None  # global time minus UTC at t0, where a host has an external source

    @classmethod
    def single(cls, host: str, t0_ns: int, offset_ns: float = 0.0, drift: float = 0.0) -> Frame:
        """Global time as one host's clock read through (offset, drift)."""
        return cls(t0_ns, ((host, 1.0, offset_ns, drift),))

    @property
    def anchor(self) -> str:
        """The heaviest member."""
        return max(self.members, key=lambda m: (m[1], m[0]))[0]

    def shares(self) -> dict[str, float]:
        return {h: w for h, w, _, _ in self.members}

    def global_ns(self, local_ns: dict[str, int]) -> int:
        """Global time when each member's clock reads local_ns[member]: the weighted mean of
        the members' readings near their median."""
        ahead = np.array([Mapping(self.t0_ns, x, y, 0.0).global_ns(local_ns[h]) - self.t0_ns
                          for h, _, x, y in self.members], dtype=float)
        return self.t0_ns + round(robust_mean(ahead, np.array([w for _, w, _, _ in self.members]), VOTE_NS))

    def as_dict(self) -> dict:
        return {"kind": "ensemble", "anchor": self.anchor, "t0_ns": self.t0_ns,
                "members": [list(m) for m in self.members], "utc_ns": self.utc_ns}

    @classmethod
    def from_dict(cls, d: object) -> Frame | None:
        """The frame a map message names (a one-host frame of older solvers too); None if it
        names none or a malformed one."""
        try:
            assert isinstance(d, dict)
            t0 = int(d["t0_ns"])
            if "members" not in d:
                assert isinstance(d["anchor"], str)
                return _finite(cls.single(d["anchor"], t0, float(d["offset_ns"]), float(d["drift"])))
            members = tuple((str(h), float(w), float(x), float(y)) for h, w, x, y in d["members"])
            utc = d.get("utc_ns")
            frame = cls(t0, members, None if utc is None else float(utc))
        except (AssertionError, KeyError, TypeError, ValueError, OverflowError):
            return None
        return _finite(frame) if members else None


def _finite(frame: Frame) -> Frame | None:
    values = [v for _, w, x, y in frame.members for v in (w, x, y)]
    return frame if np.isfinite(values).all() else None


def pivot(frame: Frame | None, reference: str, solvable: dict[str, float], bands: dict[str, float]) -> str:
    """The host the solve is anchored on: the heaviest member still solvable; else the
    reference if its band is as narrow as the fleet's; else the host with the narrowest band
    (`bands`: each clean host's typical band); else the one with the most edge weight."""
    if frame is not None:
        shares = {h: w for h, w in frame.shares().items() if h in solvable}
        if shares:
            return max(shares, key=lambda h: (shares[h], h))
    clean = {h: b for h, b in bands.items() if h in solvable}
    if clean:
        if reference in clean and clean[reference] <= 2 * statistics.median(clean.values()) + MEMBER_SLACK_NS:
            return reference
        return min(clean, key=lambda h: (clean[h], h))
    return max(solvable, key=lambda h: (solvable[h], h))


def clean(sol: Solution, index: dict[str, int], bands: dict[str, float]) -> set[str]:
    """The placed hosts whose typical band (`bands`) is near the fleet's, at a sane rate."""
    synced = sol.synced()
    placed = {h: b for h, b in bands.items() if synced[index[h]]}
    if not placed:
        return set()
    typical = statistics.median(placed.values())
    rate = statistics.median(float(sol.drift[index[h]]) for h in placed)
    return {h for h, b in placed.items()
            if b <= 2 * typical + MEMBER_SLACK_NS and abs(sol.drift[index[h]] - rate) <= MEMBER_MAX_DRIFT}


def members(sol: Solution, index: dict[str, int], bands: dict[str, float], eligible: set[str]) -> dict[str, float]:
    """Host -> weight share: the eligible clean hosts, weighted by their band's inverse square."""
    good = {h: 1.0 / max(bands[h], 1.0) ** 2 for h in clean(sol, index, bands) & eligible}
    best = sorted(good, key=lambda h: (-good[h], h))[:MAX_MEMBERS]
    return _capped({h: good[h] for h in best})


def _capped(weights: dict[str, float]) -> dict[str, float]:
    """Shares summing to one, none above MAX_SHARE where there are enough members to allow it."""
    cap = max(MAX_SHARE, 1.0 / max(len(weights), 1))
    shares = {h: w / sum(weights.values()) for h, w in weights.items()}
    for _ in range(len(shares)):
        over = {h for h, s in shares.items() if s > cap + 1e-12}
        if not over:
            break
        rest = sum(s for h, s in shares.items() if h not in over)
        spare = 1.0 - cap * len(over)
        shares = {h: cap if h in over else s * spare / rest for h, s in shares.items()}
    return shares


def ensemble(sol: Solution, index: dict[str, int], shares: dict[str, float], last: Solution | None,
             reference: str, utc: tuple[str, float, float] | None = None, last_t0_ns: int | None = None
             ) -> tuple[Solution, Frame, set[str]]:
    """`sol` (anchored on its pivot) restated in global time, the frame that defines it, and
    the members to hold out on probation. `utc`: (host, its clock minus UTC at t0, its rate
    against UTC)."""
    x, y = sol.offset_ns, sol.drift
    if not shares:  # no host looks clean: every placed one, alike
        synced = [h for h, i in index.items() if sol.synced()[i]]
        shares = {h: 1.0 / len(synced) for h in synced}
    placed = last.synced() if last is not None else None
    voters = {h: s for h, s in shares.items() if placed is not None and placed[index[h]]}
    if not voters and placed is not None:  # every member new: continue through any host placed in both
        both = [h for h, i in index.items() if placed[i] and sol.synced()[i]]
        voters = {h: 1.0 / len(both) for h in both}
    if voters:
        assert last is not None
        dt = sol.t0_ns - last.t0_ns
        votes = {h: ((last.offset_ns[i] + last.drift[i] * dt - x[i]) / (1 + y[i]), (1 + last.drift[i]) / (1 + y[i]) - 1)
                 for h in voters for i in [index[h]]}
        big_x, big_y, outvoted = _vote(votes, voters)
        # a member whose vote stands out leaves the ensemble now. Only one whose clock moved by
        # more than the two solves can place it to (it stepped or ran away, a queue bent it) is
        # held out on probation (solver.PROBATION_S); a rough solve, while the fit converges or
        # the machine stalls, costs it this solve's share alone
        held = {h for h in outvoted for i in [index[h]]
                if not abs(votes[h][0] - big_x) <= sol.limit_ns[i] + last.limit_ns[i]
                or not abs(votes[h][1] - big_y) <= sol.drift_limit[i] + last.drift_limit[i]}
        if kept := {h: s for h, s in shares.items() if h not in outvoted}:
            shares = _capped(kept)
    else:  # a fresh start: on the reference if it is a member, else on the members' mean
        start = {reference: 1.0} if reference in shares else shares
        total = sum(start.values())
        den = sum(w * (1 + y[index[h]]) for h, w in start.items())
        big_x = -sum(w * x[index[h]] for h, w in start.items()) / den
        big_y = total / den - 1
        held = set()
    utc_ns = None
    if utc is not None and utc[0] in index and sol.synced()[index[utc[0]]]:
        big_x, big_y, utc_ns = _steer(sol, index, utc, big_x, big_y, last_t0_ns)
    out = restate(sol, big_x, big_y, {index[h]: s for h, s in shares.items()})
    frame = Frame(sol.t0_ns, tuple((h, s, float(out.offset_ns[index[h]]), float(out.drift[index[h]]))
                                   for h, s in sorted(shares.items())), utc_ns)
    return out, frame, held


def near_median(values: np.ndarray, floor: float) -> np.ndarray:
    """Which values are near their median: within floor of it, or 4 spreads (the median
    absolute deviation, scaled as a standard deviation)."""
    mid = float(np.median(values))
    spread = 1.4826 * float(np.median(np.abs(values - mid)))
    return np.abs(values - mid) <= max(floor, 4 * spread)


def robust_mean(values: np.ndarray, weights: np.ndarray, floor: float) -> float:
    """The weighted mean of the values near their median."""
    near = near_median(values, floor)
    return float(np.sum(weights[near] * values[near]) / np.sum(weights[near]))


def _vote(votes: dict[str, tuple[float, float]], weights: dict[str, float]) -> tuple[float, float, set[str]]:
    """The weighted mean of the votes for X and for Y, each over the votes near their median;
    and the voters left out of either."""
    hosts = list(votes)
    w = np.array([weights[h] for h in hosts])
    x, y = (np.array([votes[h][k] for h in hosts]) for k in (0, 1))
    near_x, near_y = near_median(x, VOTE_NS), near_median(y, VOTE_DRIFT)
    out = {h for h, near in zip(hosts, near_x & near_y, strict=True) if not near}
    return robust_mean(x, w, VOTE_NS), robust_mean(y, w, VOTE_DRIFT), out


def _steer(sol: Solution, index: dict[str, int], utc: tuple[str, float, float], big_x: float, big_y: float,
           last_t0_ns: int | None) -> tuple[float, float, float]:
    """Y moved so global time's rate creeps toward UTC's, plus its offset over UTC_TAU_S; and
    global time minus UTC at t0."""
    host, u, u_rate = utc
    i = index[host]
    x_h = big_x + sol.offset_ns[i] + sol.drift[i] * big_x  # the host's clock minus global time
    y_h = (1 + big_y) * (1 + sol.drift[i]) - 1
    gap, rate = u - x_h, u_rate - y_h  # global time minus UTC, and its rate against UTC
    dt = 1.0 if last_t0_ns is None else max(0.0, (sol.t0_ns - last_t0_ns) / 1e9)
    dy = float(np.clip(rate + gap / 1e9 / UTC_TAU_S, -MAX_RATE_STEP * dt, MAX_RATE_STEP * dt))
    return big_x, (1 + big_y) * (1 + dy) - 1, float(gap)


def restate(sol: Solution, big_x: float, big_y: float, shares: dict[int, float]) -> Solution:
    """A solve anchored at its pivot (x_p = y_p = 0) in global time, where the pivot's offset
    and drift are (X, Y): c_i = c_p + x'_i + y'_i (c_p - t0) gives x_i = X + x'_i + y'_i X and
    1 + y_i = (1 + Y)(1 + y'_i).

    Bounds, against global time (the members' weighted mean): a host's error is its own less the
    members' mean one. A limit adds the members' mean limit to the host's from the pivot; a
    statistical bound takes the host's and each member's standard error as independent."""
    share = np.zeros(len(sol.sigma_ns))
    share[list(shares)] = list(shares.values())
    limit, drift_limit = (spread_limit(lim, share) for lim in (sol.limit_ns, sol.drift_limit))
    return replace(sol, offset_ns=big_x + sol.offset_ns + sol.drift * big_x, drift=(1 + big_y) * (1 + sol.drift) - 1,
                   bound_ns=np.minimum(limit, BOUND_Z * against_members(sol.sigma_ns, share)), limit_ns=limit,
                   drift_bound=np.minimum(drift_limit, BOUND_Z * against_members(sol.drift_sigma, share)),
                   drift_limit=drift_limit)


def spread_limit(limit: np.ndarray, share: np.ndarray) -> np.ndarray:
    """Each host's limit from the pivot plus the members' mean limit."""
    return limit + float(np.sum(share * limit, where=(share > 0) & np.isfinite(limit)))


def against_members(sigma: np.ndarray, share: np.ndarray) -> np.ndarray:
    """Each host's standard error against the members' weighted mean, its own and theirs taken
    as independent: e_i - sum_k s_k e_k has variance (1 - 2 s_i) sigma_i^2 + sum_k s_k^2 sigma_k^2
    (inf where a member has none)."""
    members = sigma[share > 0]
    if not np.isfinite(members).all():
        return np.full(len(sigma), np.inf)
    theirs = float(np.sum(share[share > 0] ** 2 * members**2))
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(sigma), np.sqrt((1 - 2 * share) * sigma**2 + theirs), np.inf)
