"""The per-pair band fit (clock/fit.py): known offsets and drifts in, the same numbers out.

Points are made the way pure probes make them: a forward probe sent at t (our clock, epoch
ns) and received at r (the peer's clock) gives (t, r - t) = (t, theta(t) + delay); a reverse
probe received at r' (our clock) gives (r', t' - r') = (r', theta(r') - delay), with
theta(t) = offset + drift * (t - center) the peer's clock minus ours. Timestamps are integers,
so every point carries up to half a nanosecond of rounding.
"""

import numpy as np
import pytest

from clockfabric.clock.fit import PairFit, fit_band

EPOCH = 1_800_000_000_000_000_000  # ~2027 in epoch ns: float64 cannot hold it to the ns
WINDOW_NS = 2_000_000_000
CENTER = EPOCH + WINDOW_NS // 2
FLOOR_NS = 5_000  # one-way minimum delay


def theta(offset_ns: float, drift: float, t: np.ndarray) -> np.ndarray:
    """Peer minus ours at our time t (float ns relative to CENTER is exact enough)."""
    return offset_ns + drift * (t - CENTER).astype(float)


def make_points(offset_ns: float, drift: float, *, n: int = 1000, seed: int = 0,
                fwd_floor: float = FLOOR_NS, rev_floor: float = FLOOR_NS,
                fwd_queue_mean: float = 20_000.0, rev_queue_mean: float = 20_000.0,
                fwd_queued: float = 0.7, rev_queued: float = 0.7,
                rev_floor_count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Forward and reverse point clouds, int64 (n, 2), as integer timestamps would give them.

    A fraction `*_queued` of the probes meets an exponential queue; the others arrive at the
    floor. With `rev_floor_count`, every reverse probe is queued except that many, evenly
    spread over the window (one alone sits in its middle)."""
    rng = np.random.default_rng(seed)
    t = EPOCH + np.sort(rng.integers(0, WINDOW_NS, n))  # our send times
    q = np.where(rng.random(n) < fwd_queued, rng.exponential(fwd_queue_mean, n), 0.0)
    r = t + np.rint(theta(offset_ns, drift, t) + fwd_floor + q).astype(np.int64)  # the peer's receive stamps
    fwd = np.column_stack([t, r - t]).astype(np.int64)

    r2 = EPOCH + np.sort(rng.integers(0, WINDOW_NS, n))  # our receive times of reverse probes
    if rev_floor_count is None:
        queued = rng.random(n) < rev_queued
    else:
        queued = np.ones(n, dtype=bool)
        queued[((np.arange(rev_floor_count) + 0.5) * n / rev_floor_count).astype(int)] = False
    q2 = np.where(queued, rng.exponential(rev_queue_mean, n), 0.0)
    t2 = r2 + np.rint(theta(offset_ns, drift, r2) - rev_floor - q2).astype(np.int64)  # the peer's send stamps
    rev = np.column_stack([r2, t2 - r2]).astype(np.int64)
    return fwd, rev


CASES = [  # (offset ns, relative drift)
    (0.0, 0.0),
    (50_000_000.0, 200e-6),
    (-50_000_000.0, -200e-6),
    (12_345_678.9, -37.5e-6),
    (-3_141_592.6, 150e-6),
    (777.3, 1e-9),
]


@pytest.mark.parametrize("offset_ns,drift", CASES)
def test_symmetric_floors_recover_offset_and_drift(offset_ns, drift):
    fwd, rev = make_points(offset_ns, drift, seed=int(abs(offset_ns)) % 1000)
    fit = fit_band(fwd, rev, CENTER)
    assert fit is not None
    assert fit.center_ns == CENTER
    assert abs(fit.offset_ns - offset_ns) < 5.0  # ns: only integer rounding is left
    assert abs(fit.drift - drift) < 5e-9  # 5 ppb: a few ns over the window
    assert abs(fit.margin_ns - FLOOR_NS) < 5.0  # half the band is the (common) floor
    assert (fit.n_fwd, fit.n_rev, fit.dropped) == (1000, 1000, 0)


@pytest.mark.parametrize("seed", range(5))
def test_random_offsets_and_drifts(seed):
    rng = np.random.default_rng(100 + seed)
    offset_ns = float(rng.uniform(-50e6, 50e6))
    drift = float(rng.uniform(-200e-6, 200e-6))
    fwd, rev = make_points(offset_ns, drift, n=500, seed=seed)
    fit = fit_band(fwd, rev, CENTER)
    assert abs(fit.offset_ns - offset_ns) < 5.0
    assert abs(fit.drift - drift) < 5e-9
    # the fitted line is right across the whole window, not only at its middle
    for t in (EPOCH, CENTER, EPOCH + WINDOW_NS):
        assert abs(fit.at(t) - (offset_ns + drift * (t - CENTER))) < 10.0


def test_every_point_lies_on_its_side_of_the_fitted_band():
    fwd, rev = make_points(1_234_567.0, 42e-6, seed=3)
    fit = fit_band(fwd, rev, CENTER)
    line_f = np.array([fit.at(int(t)) for t in fwd[:, 0]])
    line_r = np.array([fit.at(int(t)) for t in rev[:, 0]])
    assert (fwd[:, 1] - line_f).min() == pytest.approx(fit.margin_ns, abs=1e-3)
    assert (line_r - rev[:, 1]).min() == pytest.approx(fit.margin_ns, abs=1e-3)


def test_one_direction_heavily_queued_with_a_few_floor_probes():
    """Reverse probes queue for ~0.5 ms on average; only five of a thousand see the floor."""
    offset_ns, drift = -23_456_789.4, 88e-6
    fwd, rev = make_points(offset_ns, drift, seed=11, rev_queue_mean=500_000.0, rev_floor_count=5)
    assert np.median(theta(offset_ns, drift, rev[:, 0]) - rev[:, 1]) > 100_000  # really queued
    fit = fit_band(fwd, rev, CENTER)
    assert abs(fit.offset_ns - offset_ns) < 5.0
    assert abs(fit.drift - drift) < 5e-9
    assert abs(fit.margin_ns - FLOOR_NS) < 5.0


def test_a_single_floor_probe_in_one_direction_is_enough_when_the_other_spans_the_window():
    offset_ns, drift = 7_000_000.0, -120e-6
    fwd, rev = make_points(offset_ns, drift, seed=12, rev_queue_mean=300_000.0, rev_floor_count=1)
    fit = fit_band(fwd, rev, CENTER)
    assert abs(fit.offset_ns - offset_ns) < 5.0
    assert abs(fit.drift - drift) < 5e-9


def _floor_indices(points: np.ndarray, offset_ns: float, drift: float, sign: int) -> np.ndarray:
    return np.flatnonzero(np.abs(sign * (points[:, 1] - theta(offset_ns, drift, points[:, 0])) - FLOOR_NS) <= 1)


@pytest.mark.parametrize("seed", range(6))
def test_late_timestamps_that_overlap_the_clouds_are_dropped(seed):
    """A send stamp taken 30 us late moves a floor forward point down (r - t shrinks) 20 us into
    the reverse cloud; a late reverse send stamp moves its point up into the forward cloud."""
    offset_ns, drift = 31_000_000.0, -64e-6
    fwd, rev = make_points(offset_ns, drift, seed=seed)
    rng = np.random.default_rng(seed)
    bad_f = rng.choice(_floor_indices(fwd, offset_ns, drift, +1), 4, replace=False)
    bad_r = rng.choice(_floor_indices(rev, offset_ns, drift, -1), 3, replace=False)
    fwd[bad_f, 1] -= 30_000
    rev[bad_r, 1] += 30_000
    assert fwd[:, 1].min() < rev[:, 1].max()  # the clouds overlap: no band separates them
    fit = fit_band(fwd, rev, CENTER)
    # all seven are gone (any one left would make the margin negative)...
    assert fit.dropped >= len(bad_f) + len(bad_r)
    assert fit.n_fwd <= 1000 - len(bad_f) and fit.n_rev <= 1000 - len(bad_r)
    assert fit.n_fwd + fit.n_rev == 2000 - fit.dropped
    assert abs(fit.margin_ns - FLOOR_NS) < 5.0
    # ...and the fit is as good as without them. (Greedy removal also drops some good points:
    # 8 to 33 in all here for 7 outliers; the floor survives elsewhere, so accuracy does not suffer.)
    assert abs(fit.offset_ns - offset_ns) < 5.0
    assert abs(fit.drift - drift) < 5e-9


def test_outlier_dropping_stops_at_its_budget():
    """More overlap than max_outliers allows: the fit gives up dropping and says so (margin < 0)."""
    fwd, rev = make_points(0.0, 0.0, n=100, seed=5)
    fwd[:30, 1] -= 30_000  # 30 of 200 points: over a 10% budget
    fit = fit_band(fwd, rev, CENTER, max_outliers=0.1)
    assert fit.dropped == 20
    assert fit.margin_ns < 0


def test_none_when_a_direction_has_no_points():
    fwd, rev = make_points(1000.0, 1e-6, n=50)
    empty = np.zeros((0, 2), dtype=np.int64)
    assert fit_band(fwd, empty, CENTER) is None
    assert fit_band(empty, rev, CENTER) is None
    assert fit_band(empty, empty, CENTER) is None


def test_given_drift_fits_only_the_offset():
    offset_ns, drift = -4_000_000.0, 55e-6
    fwd, rev = make_points(offset_ns, drift, seed=8)
    fit = fit_band(fwd, rev, CENTER, drift=drift)
    assert fit.drift == drift
    assert abs(fit.offset_ns - offset_ns) < 5.0
    # a drift that is 1 ppm wrong tilts the line: at the centre it still lands within the band
    off = fit_band(fwd, rev, CENTER, drift=drift + 1e-6)
    assert off.drift == drift + 1e-6
    assert off.margin_ns < fit.margin_ns - 100  # the band is narrower: ~1 us of tilt over 2 s


def test_too_little_time_spread_keeps_the_prior_drift():
    """Points within 0.5 ms cannot tell a drift: the prior is kept, the offset still fitted."""
    rng = np.random.default_rng(2)
    t = EPOCH + np.sort(rng.integers(0, 500_000, 20))
    fwd = np.column_stack([t, np.full(20, 2_000_000 + FLOOR_NS)]).astype(np.int64)
    rev = np.column_stack([t + 7, np.full(20, 2_000_000 - FLOOR_NS)]).astype(np.int64)
    fit = fit_band(fwd, rev, EPOCH, prior_drift=3e-6)
    assert fit.drift == 3e-6
    assert abs(fit.at(int(t.mean())) - 2_000_000) < 2.0


def test_pairfit_at_is_the_line():
    f = PairFit(offset_ns=100.0, drift=1e-5, center_ns=EPOCH, margin_ns=5000.0, n_fwd=3, n_rev=3)
    assert f.at(EPOCH) == 100.0
    assert f.at(EPOCH + 1_000_000_000) == pytest.approx(100.0 + 10_000.0)
    assert f.at(EPOCH - 1_000_000_000) == pytest.approx(100.0 - 10_000.0)


# ---- what the method cannot do ---------------------------------------------------------------

@pytest.mark.parametrize("asym_ns", [1_000, 4_000, -6_000])
def test_limit_unequal_minimum_delays_bias_the_offset_by_half_the_difference(asym_ns):
    """The band fit assumes equal minimum delays both ways. When the forward floor is D longer
    than the reverse one, the middle line sits D/2 above the truth, and nothing in the pair's
    own data can tell: the same timestamps come from a peer D/2 further ahead over symmetric
    floors. Only the network effect (loops through other pairs) can undo this."""
    offset_ns, drift = 2_500_000.0, 20e-6
    mean_floor = FLOOR_NS + asym_ns / 2
    fwd, rev = make_points(offset_ns, drift, seed=4, fwd_floor=FLOOR_NS + asym_ns, rev_floor=FLOOR_NS)
    fit = fit_band(fwd, rev, CENTER)
    assert fit.offset_ns - offset_ns == pytest.approx(asym_ns / 2, abs=5.0)
    assert abs(fit.drift - drift) < 5e-9  # the drift is still right
    assert fit.margin_ns == pytest.approx(mean_floor, abs=5.0)  # the mean of the two floors
    # indistinguishable: a clock D/2 further ahead with both floors at the mean gives the same points
    twin_f, twin_r = make_points(offset_ns + asym_ns / 2, drift, seed=4, fwd_floor=mean_floor, rev_floor=mean_floor)
    assert np.abs(twin_f - fwd).max() <= 1 and np.abs(twin_r - rev).max() <= 1  # up to rounding


def test_limit_a_late_stamp_that_stays_between_the_clouds_is_not_dropped():
    """Outliers are only recognised when the clouds overlap. A floor forward point whose send
    stamp is 6 us late lands 1 us *below* the line but still above the reverse cloud's
    ceiling (-5 us): nothing overlaps, nothing is dropped, and the band narrows around it,
    moving the offset by microseconds. Purity (both packets of a pair see the same delay)
    does not catch a late software send stamp on the first packet alone either."""
    offset_ns, drift = 31_000_000.0, -64e-6
    fwd, rev = make_points(offset_ns, drift, seed=1)
    clean = fit_band(fwd, rev, CENTER)
    middle = _floor_indices(fwd, offset_ns, drift, +1)
    i = middle[np.argmin(np.abs(fwd[middle, 0] - CENTER))]  # the floor point nearest the centre
    fwd[i, 1] -= 6_000
    fit = fit_band(fwd, rev, CENTER)
    assert fit.dropped == 0
    assert abs(clean.offset_ns - offset_ns) < 5.0
    assert fit.offset_ns - offset_ns == pytest.approx(-3_000, abs=5.0)  # half the late stamp
    assert fit.margin_ns == pytest.approx(FLOOR_NS - 3_000, abs=5.0)


def test_one_sided_clouds_keep_the_prior_drift():
    """When every reverse point comes after every forward point (a direction that was queued
    for a while comes back), tilting the band only widens it, so the data cannot pin a slope:
    the fit keeps the prior drift instead of running to MAX_SLOPE, and the offset stays right."""
    offset_ns, drift = 5_000_000.0, 10e-6
    fwd, _ = make_points(offset_ns, drift, n=200, seed=9)
    fwd = fwd[fwd[:, 0] < CENTER]  # forward points in the first half only
    t = EPOCH + WINDOW_NS - 1_000  # one reverse point, at the floor, at the end of the window
    rev = np.array([[t, round(offset_ns + drift * (t - CENTER) - FLOOR_NS)]], dtype=np.int64)
    fit = fit_band(fwd, rev, CENTER, prior_drift=drift)
    assert fit.drift == drift
    assert abs(fit.offset_ns - offset_ns) < 50