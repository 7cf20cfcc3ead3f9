"""Per-pair fit: the offset and drift of peer B's clock relative to ours from pure probes.

A pure A->B probe sent at t (A's clock) and received at r (B's clock) gives the point
(t, r - t), on or above the line theta(t) = offset + drift * t by its one-way delay; a pure
B->A probe sent at t' (B) and received at r' (A) gives (r', t' - r'), on or below it. The
two clouds have hard edges, the minimum delays. We fit the separating band of greatest
width (a hard-margin linear SVM in one dimension, which is a small linear program) and
take its middle line. The margin m(slope) is concave and piecewise linear in the slope, and
its corners are the slopes of the edges of two convex hulls (the upper cloud's floor and
the lower cloud's ceiling): the best slope is the corner with the widest margin, found
exactly by evaluating every corner at once.

The same corners give the slopes the points allow: every one-way delay is positive, so the
true line runs inside the band at the true slope, and the true slope is one at which the
clouds still separate (m >= 0). That interval, against the fitted slope, bounds the drift's
error per pair: a few tens of ppb on an idle path, tens of ppm where a queue moved.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

MAX_SLOPE = 1e-3  # relative drift search range: clocks within +-500 ppm of each other
# the least drift bound a band gives: what a few software timestamps late at the band's edges
# can still hide (idle bands allow tens of ppb over 16 s, a few over 64 s)
MIN_DRIFT_BOUND = 10e-9
MAX_DROPS = 40  # more overlap than this is not a few late timestamps but mixed-up data


@dataclass(frozen=True)
class PairFit:
    offset_ns: float  # peer clock minus ours, at `center_ns` of our clock
    drift: float  # d(peer - ours)/d(ours): 1e-6 is one ppm
    center_ns: int  # in our clock
    margin_ns: float  # half the band: the mean of the two minimum one-way delays
    n_fwd: int
    n_rev: int
    dropped: int = 0  # points discarded as timestamp outliers
    pinned: bool = True  # the slope came from the points (or was given), not from a prior guess
    reach_ns: float = 0.0  # the farthest kept point from the centre, in time
    drift_bound: float = 2 * MAX_SLOPE  # how far `drift` can be from the truth (the feasible slopes)

    def at(self, t_ns: int) -> float:
        return self.offset_ns + self.drift * (t_ns - self.center_ns)

    def bound_ns(self) -> float:
        """How far the offset at the centre can be from the truth. Every delay is positive, so
        the true line runs inside the band at the true slope: within the half-width of the
        middle line, widened where the fitted slope may be off by up to `drift_bound`."""
        return abs(self.margin_ns) + self.drift_bound * self.reach_ns


def _margin(slope: float, xu, yu, xl, yl) -> tuple[float, float]:
    """For one slope: the band's half-width and the middle line's intercept."""
    low_edge = np.min(yu - slope * xu)  # the upper cloud's floor
    high_edge = np.max(yl - slope * xl)  # the lower cloud's ceiling
    return (low_edge - high_edge) / 2, (low_edge + high_edge) / 2


def _hull_slopes(x: np.ndarray, y: np.ndarray) -> list[float]:
    """Slopes of the edges of the lower convex hull of the points (x, y) (monotone chain)."""
    order = np.lexsort((y, x))
    hull: list[tuple[float, float]] = []
    for px, py in zip(x[order].tolist(), y[order].tolist(), strict=True):
        while len(hull) >= 2:
            (ox, oy), (ax, ay) = hull[-2], hull[-1]
            if (ax - ox) * (py - oy) - (ay - oy) * (px - ox) > 0:
                break
            hull.pop()
        hull.append((px, py))
    return [(by - ay) / (bx - ax) for (ax, ay), (bx, by) in pairwise(hull) if bx != ax]


def _pins_slope(xu, xl) -> bool:
    """The clouds must share a stretch of time (0.1 s) to pin a slope; else the band could
    tilt freely."""
    overlap = min(xu.max(), xl.max()) - max(xu.min(), xl.min())
    return len(xu) + len(xl) >= 3 and overlap >= 1e8


def _corner_margins(xu, yu, xl, yl) -> tuple[np.ndarray, np.ndarray]:
    """The corners of the band's width as a function of the slope, sorted, and the width at each."""
    corners = np.array([-MAX_SLOPE, MAX_SLOPE, *_hull_slopes(xu, yu),
                        *(-k for k in _hull_slopes(xl, -yl))])  # the ceiling: a hull upside down
    corners = np.unique(corners[np.abs(corners) <= MAX_SLOPE])
    low_edges = np.min(yu[None, :] - corners[:, None] * xu[None, :], axis=1)
    high_edges = np.max(yl[None, :] - corners[:, None] * xl[None, :], axis=1)
    return corners, low_edges - high_edges


Corners = tuple[np.ndarray, np.ndarray] | None  # _corner_margins' answer; None: the clouds pin no slope


def _corners(xu, yu, xl, yl) -> Corners:
    return _corner_margins(xu, yu, xl, yl) if _pins_slope(xu, xl) else None


def _best_slope(corners: Corners, prior: float) -> float:
    if corners is None:
        return prior  # keep the last known drift
    slopes, margins = corners
    best = slopes[margins >= margins.max() - 1e-6]  # a flat top: take its middle
    return float(best.min() + best.max()) / 2


def feasible_slopes(xu, yu, xl, yl) -> tuple[float, float]:
    """The slopes at which the clouds still separate, within +-MAX_SLOPE."""
    return _feasible(_corners(xu, yu, xl, yl))


def _feasible(corners: Corners) -> tuple[float, float]:
    """The width is concave and linear between corners, so the ends lie where it crosses the
    level between two corners. Where the clouds overlap at every slope (late timestamps the fit
    kept), the level is as deep again as the best slope's overlap."""
    if corners is None:
        return -MAX_SLOPE, MAX_SLOPE
    slopes, widths = corners
    level = min(0.0, 2 * widths.max())
    inside = np.flatnonzero(widths >= level)
    first, last = int(inside[0]), int(inside[-1])
    return _crossing(slopes, widths, first, first - 1, level), _crossing(slopes, widths, last, last + 1, level)


def _crossing(corners: np.ndarray, widths: np.ndarray, inside: int, outside: int, level: float) -> float:
    """Where the width falls to `level` between corner `inside` (at or above it) and its
    neighbour `outside` (below it); the inside corner itself at the end of the range."""
    if outside < 0 or outside >= len(corners):
        return float(corners[inside])
    share = (widths[inside] - level) / (widths[inside] - widths[outside])
    return float(corners[inside] + share * (corners[outside] - corners[inside]))


def fit_band(fwd: np.ndarray, rev: np.ndarray, center_ns: int, *, prior_drift: float = 0.0,
             drift: float | None = None, drift_bound: float = 2 * MAX_SLOPE,
             max_outliers: float = 0.2) -> PairFit | None:
    """Fit from forward points (t, r - t) and reverse points (r', t' - r'), int64 arrays (n, 2).

    With `drift` given, only the offset is fitted (the slope came from a longer history, which
    also gives its `drift_bound`); else the drift bound comes from the feasible slopes.
    If the clouds overlap, some timestamp was late: drop the worst offender and refit, up to
    `max_outliers` of the points. None if either direction has no point."""
    if len(fwd) == 0 or len(rev) == 0:
        return None
    xu, yu = (fwd[:, 0] - center_ns).astype(float), fwd[:, 1].astype(float)
    xl, yl = (rev[:, 0] - center_ns).astype(float), rev[:, 1].astype(float)
    budget = min(MAX_DROPS, int(max_outliers * (len(xu) + len(xl))))
    dropped = 0
    while True:
        # the corners serve the slope and, for the points kept at the end, the drift bound
        corners = None if drift is not None else _corners(xu, yu, xl, yl)
        slope = drift if drift is not None else _best_slope(corners, prior_drift)
        margin, intercept = _margin(slope, xu, yu, xl, yl)
        if margin >= 0 or dropped >= budget or len(xu) + len(xl) <= 2:
            break
        # the point deepest on the wrong side of the middle line goes
        over = yu - (intercept + slope * xu)
        under = (intercept + slope * xl) - yl
        if len(xu) > 1 and (len(xl) == 1 or over.min() < under.min()):
            keep = np.arange(len(xu)) != over.argmin()
            xu, yu = xu[keep], yu[keep]
        elif len(xl) > 1:
            keep = np.arange(len(xl)) != under.argmin()
            xl, yl = xl[keep], yl[keep]
        else:
            break
        dropped += 1
    if drift is None:
        low, high = _feasible(corners)
        drift_bound = max(slope - low, high - slope, MIN_DRIFT_BOUND)
    return PairFit(intercept, slope, center_ns, margin, len(xu), len(xl), dropped,
                   pinned=drift is not None or _pins_slope(xu, xl),
                   reach_ns=float(max(np.abs(xu).max(), np.abs(xl).max())), drift_bound=drift_bound)
