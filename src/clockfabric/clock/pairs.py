"""One peer's probe history as the estimator sees it: pure points in a sliding window,
clock-step detection, and the NTP-style sample the baseline uses.

Purity: a coded pair left with gap g and arrived with gap g' (each in one host's clock);
if |g' - g| <= epsilon, neither packet met a queue, so the pair's delay is the path's
floor. Step detection: a pure point on the wrong side of the band (beyond its floor by
more than a tolerance) cannot come from queueing, only from a clock that jumped; two in
a row and the pair forgets everything before the first. Which clock jumped, ours or the
peer's, the pair cannot tell; the host can (HostSync), and then shifts the pair at once.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from clockfabric.clock.fit import PairFit, fit_band
from clockfabric.probe.engine import Exchange

MIN_PURE = 8  # pure points a side that make a window's offset fit: fewer leave its floors high
# ... and the points a side the offset's middle is taken from, over up to `offset_windows`: on
# software timestamps a path's floor is soft (pure one-way delays spread over microseconds), and
# the least of a few points sits hundreds of ns above it, on each side its own way
MIN_PURE_MIDDLE = 24


@dataclass(frozen=True)
class NtpSample:
    """The min-RTT exchange of the window: NTP's offset estimate, half the round trip apart."""

    offset_ns: float  # peer minus ours
    at_ns: int  # our clock
    rtt_ns: int


@dataclass(frozen=True)
class Step:
    """A clock step as one pair sees it: from exchange `seq` on (our clock `at_ns`), the
    offset, peer minus ours, moved by `delta_ns`."""

    seq: int
    at_ns: int
    delta_ns: float


class PairWindow:
    """Offsets come from the last window, widened up to `widest_windows` where pure points
    are scarce, and their middle from up to `offset_windows` where that holds few points;
    drift, which a two-second window measures poorly from software timestamps (a few hundred ns
    of jitter over two seconds is 100 ppb), from `drift_windows` windows of history, cut short
    by a clock step. The exchanges themselves are kept for the window, or for
    `report_ns` where that is longer: the one-way delays an update reports are all of its
    exchanges', not only its last window's."""

    def __init__(self, peer: str, *, window_ns: int = 2_000_000_000, epsilon_ns: int = 1_000,
                 step_tolerance_ns: int = 20_000, drift_windows: int = 32, widest_windows: int = 3,
                 offset_windows: int = 8, report_ns: int = 0):
        self.peer = peer
        self.window_ns = window_ns
        self.report_ns = max(window_ns, report_ns)
        self.history_ns = window_ns * drift_windows
        # A direction with no pure point for this long is queued for good (a FIFO full of bulk
        # packets spaces every probe pair apart): the pair gives no fit rather than one whose
        # points predate the queue, which would keep a host whose every path is queued looking
        # synced until they left the drift history.
        self.widest_ns = min(window_ns * widest_windows, self.history_ns)
        # The band (its width, the bound, what names a queued host) is the last `widest_ns`'
        # alone; its middle may reach further back, where the drift, fitted over a history
        # several times as long, carries older floors to now within tens of ns.
        self.middle_ns = min(window_ns * max(offset_windows, widest_windows), self.history_ns)
        self.epsilon_ns = epsilon_ns
        self.step_tolerance_ns = step_tolerance_ns
        # points carry the exchange's sequence number: a step cuts by arrival, not by our
        # clock, which a backward step sends back over the points before it
        self.fwd: deque[tuple[int, int, int]] = deque()  # (t, r - t, seq)
        self.rev: deque[tuple[int, int, int]] = deque()  # (r', t' - r', seq)
        self.exchanges: deque[Exchange] = deque()
        self.fit: PairFit | None = None
        self.drift_prior = 0.0  # the last fitted drift: a clock step moves the offset, not the rate
        # until some fit pins the drift, a fit's extrapolation drifts away from the points at
        # up to 200 ppm (two clocks at 100 ppm): that is no step
        self.drift_known = False
        self.steps = 0
        self.last_step: Step | None = None
        self.provisional = False  # the fit is the last one moved by a step, not yet one of new points
        # per direction (True: forward), the first point that broke the band: a step moves
        # both clouds one way, so only one side breaks while the other looks queued
        self._suspect: dict[bool, Step | None] = {True: None, False: None}
        self.seen = self.pure_fwd = self.pure_rev = 0
        # the drift's fit over the history, redone once an eighth of the history it spans has
        # passed on our clock, either way (a clock set back counts): a second's new points move
        # a slope fitted over many seconds by little, and this fit is most of the agent's clock
        # CPU. Over a pair's first seconds its few points make it cheap and each update's new
        # ones matter most: a slope from a second of points, kept a window, is hundreds of ppb
        # off. After a cut the slope from before it stands in (as a prior) and the fit waits a
        # window at least: its first points may be a queue's, or an exchange that began before
        # the step, and a slope refitted to each of them swings
        self._long: PairFit | None = None
        self._long_at_ns = 0
        # the last refit's exchange count, time and answer: with no exchange since, a refit within
        # a window answers the same (its points are the same but for those a second older)
        self._refitted: tuple[int, int, PairFit | None] | None = None

    def add(self, ex: Exchange) -> list[tuple[bool, float | None]]:
        """Take one exchange. Returns, per pure point checked against the band, its side
        (True: forward) and the offset change it implies, None where it sits in the band."""
        self.seen += 1
        self.exchanges.append(ex)
        checked = []
        fwd_pure = abs((ex.peer_rx[1] - ex.peer_rx[0]) - (ex.tx[1] - ex.tx[0])) <= self.epsilon_ns
        rev_pure = abs((ex.rx[1] - ex.rx[0]) - (ex.peer_tx[1] - ex.peer_tx[0])) <= self.epsilon_ns
        if fwd_pure:
            self.pure_fwd += 1
            checked.append(self._check_step(ex.tx[0], ex.peer_rx[0] - ex.tx[0], above=True))
            self.fwd.append((ex.tx[0], ex.peer_rx[0] - ex.tx[0], self.seen))
        if rev_pure:
            self.pure_rev += 1
            checked.append(self._check_step(ex.rx[0], ex.peer_tx[0] - ex.rx[0], above=False))
            self.rev.append((ex.rx[0], ex.peer_tx[0] - ex.rx[0], self.seen))
        if self.provisional and self.fwd and self.rev:  # all cut at the step: new points both ways
            self.provisional = False
        return [c for c in checked if c is not None]

    def _check_step(self, x: int, y: int, *, above: bool) -> tuple[bool, float | None] | None:
        # Only a fit whose slope the points pinned is a band to break. After a step the pair
        # holds a stand-in (the old fit, moved) and then fits of one or two points on the old
        # drift: a clock whose rate changed breaks those by more at every point, and checking
        # them would cut the pair at each one, never keeping the two exchanges that fit the new rate.
        if self.fit is None or not self.drift_known or not self.fit.pinned or self.provisional:
            return None
        side = (y - self.fit.at(x)) if above else (self.fit.at(x) - y)
        beyond = side - self.fit.margin_ns
        if beyond >= -self.step_tolerance_ns:
            self._suspect[above] = None
            return above, None
        # the offset (peer minus ours) moved down by at least this much if the forward floor
        # broke, up if the reverse ceiling did; queueing only adds, so the point nearest the
        # true floor is the deepest one
        delta = beyond if above else -beyond
        first = self._suspect[above]
        if first is None:
            self._suspect[above] = Step(self.seen, x, delta)
            return above, delta
        # a second point in a row beyond the floor: the clock stepped at or before the first
        self.shift(Step(first.seq, first.at_ns, max(first.delta_ns, delta, key=abs)), provisional=False)
        return above, delta

    @property
    def unsure(self) -> bool:
        """A point broke the band and is not yet explained, or the pair cut at a step and has
        no fit pinned by its own points since: more exchanges soon would settle it."""
        if self._suspect[True] or self._suspect[False]:
            return True
        return self.steps > 0 and (self.fit is None or self.provisional or not self.fit.pinned)

    @property
    def doubtful(self) -> bool:
        """The fit is no evidence for the solve: the pair is unsure, its slope a guess (the old
        drift: right after a step, wrong after a change of rate, and one host's edges wrong
        that way bend its neighbours' in a least squares). Not the stand-in after a step the
        host knows the size of: that one is evidence, and reported."""
        return self.unsure and not self.provisional

    def breaks(self) -> list[Step]:
        """The live first breaks, either side."""
        return [s for s in self._suspect.values() if s is not None]

    def suspect(self, delta_ns: float) -> Step | None:
        """The live first break of the side a change of this sign shows on, if it agrees."""
        first = self._suspect[delta_ns < 0]
        if first is not None and abs(first.delta_ns - delta_ns) <= self.step_tolerance_ns:
            return first
        return None

    def shift(self, step: Step, *, provisional: bool = True) -> None:
        """A clock stepped by `step.delta_ns` (our view of peer minus ours) at or before
        exchange `step.seq`: forget everything before it. With `provisional`, the host knows
        the size (several pairs or the peer itself say so), so the last fit, moved by it,
        stands in until new points give a fit of their own."""
        if (self.last_step is not None and abs(step.at_ns - self.last_step.at_ns) <= self.window_ns
                and abs(self.last_step.delta_ns - step.delta_ns) <= self.step_tolerance_ns):
            return  # this step, already taken (the pair saw it itself, or was told twice)
        self.steps += 1
        self.last_step = step
        for points in (self.fwd, self.rev):
            while points and points[0][2] < step.seq:
                points.popleft()
        while len(self.exchanges) > self.seen - step.seq + 1:
            self.exchanges.popleft()
        old, self.fit, self._long, self._refitted = self.fit, None, None, None
        if old is not None:
            self.drift_prior = old.drift
            if provisional:
                self.fit = replace(old, offset_ns=old.offset_ns + step.delta_ns)
                self.provisional = True
        self._suspect = {True: None, False: None}

    def trim(self, now_ns: int) -> None:
        start = now_ns - self.history_ns
        for points in (self.fwd, self.rev):
            while points and points[0][0] < start:
                points.popleft()
        while self.exchanges and self.exchanges[0].tx[0] < now_ns - self.report_ns:
            self.exchanges.popleft()

    def refit(self, now_ns: int) -> PairFit | None:
        """Fit the band over the window ending now, widened (doubling, up to `widest_ns`) while
        it holds fewer than MIN_PURE pure points a side: under a queue that rarely drains, the
        few moments it did are worth an older centre. Its middle comes from further back
        (doubling, up to `middle_ns`) while it holds fewer than MIN_PURE_MIDDLE a side; its width
        stays the band's. None while a direction has no point in the widest window.

        With no exchange since the last refit, less than a window ago, its answer stands: on a
        settled clock a pair exchanges every other update or so, and this refit is most of an
        idle agent's clock CPU."""
        self.trim(now_ns)
        if (last := self._refitted) is not None and last[0] == self.seen and 0 <= now_ns - last[1] < self.window_ns:
            return last[2]
        fit = self._refit(now_ns)
        self._refitted = (self.seen, now_ns, fit)
        return fit

    def _refit(self, now_ns: int) -> PairFit | None:
        held = (max(self.fwd[-1][0], self.rev[-1][0]) - min(self.fwd[0][0], self.rev[0][0])
                if self.fwd and self.rev else 0)
        # the middle reaches back a quarter of the drift's history at most: its floors are
        # carried to now by a slope fitted over four times their span
        widest_middle = min(self.middle_ns, held // 4)
        # only what this update's offset fits can reach becomes arrays (the history is 4-8 times as long)
        start = now_ns - max(self.widest_ns, widest_middle)
        fwd, rev = _tail(self.fwd, start), _tail(self.rev, start)
        span = self.window_ns
        while True:
            recent_fwd, recent_rev = _since(fwd, now_ns - span), _since(rev, now_ns - span)
            if min(len(recent_fwd), len(recent_rev)) >= MIN_PURE or span >= self.widest_ns:
                break
            span = min(2 * span, self.widest_ns)
        if not len(recent_fwd) or not len(recent_rev):
            return self.fit if self.fit and now_ns - self.fit.center_ns < self.window_ns else None
        long = self._long
        if long is None or not long.pinned or abs(now_ns - self._long_at_ns) >= self._drift_every(held):
            prior = self.fit.drift if self.fit else self.drift_prior
            every_fwd, every_rev = _tail(self.fwd), _tail(self.rev)
            long = fit_band(every_fwd, every_rev, _middle(every_fwd, every_rev), prior_drift=prior)
            assert long is not None  # both directions have points: the recent ones
            if self.steps and held < self.window_ns and long.pinned and abs(prior - long.drift) <= long.drift_bound:
                # since a cut, a window's points pin a slope only roughly (a few exchanges, a
                # second apart or less): the drift from before it stands while they allow it,
                # as after a step; a rate that changed leaves it outside their range at once
                long = fit_band(every_fwd, every_rev, _middle(every_fwd, every_rev), drift=prior,
                                drift_bound=long.drift_bound)
                assert long is not None
            self._long, self._long_at_ns = long, now_ns
        self.drift_known = self.drift_known or long.pinned
        recent = fit_band(recent_fwd, recent_rev, _middle(recent_fwd, recent_rev), drift=long.drift,
                          drift_bound=long.drift_bound)
        assert recent is not None
        wide_fwd, wide_rev = recent_fwd, recent_rev
        while min(len(wide_fwd), len(wide_rev)) < MIN_PURE_MIDDLE and span < widest_middle:
            span = min(2 * span, widest_middle)
            wide_fwd, wide_rev = _since(fwd, now_ns - span), _since(rev, now_ns - span)
        # only where both separate: clouds that still overlap (late stamps past the drop budget)
        # have no middle worth moving to
        wide = None
        if recent.margin_ns >= 0 and len(wide_fwd) + len(wide_rev) > len(recent_fwd) + len(recent_rev):
            wide = fit_band(wide_fwd, wide_rev, _middle(wide_fwd, wide_rev), drift=long.drift,
                            drift_bound=long.drift_bound)
        if wide is not None and wide.margin_ns >= 0:
            # the band's width and points stay the window's: the bound, the pair's weight and
            # the naming of a queued host are what they were; only the middle line moves
            recent = replace(wide, margin_ns=recent.margin_ns, n_fwd=recent.n_fwd, n_rev=recent.n_rev)
        self.fit = replace(recent, pinned=long.pinned)
        return self.fit

    def _drift_every(self, held_ns: int) -> int:
        """How long the drift's fit over `held_ns` of history stands before it is redone."""
        return held_ns // 8 if self.steps == 0 else max(self.window_ns, held_ns // 8)

    def ntp(self) -> NtpSample | None:
        """NTP's filter: of the window's exchanges, the one with the smallest round trip."""
        if not self.exchanges:
            return None
        start = self.exchanges[-1].tx[0] - self.window_ns
        best = min((e for e in self.exchanges if e.tx[0] >= start),
                   key=lambda e: (e.rx[0] - e.tx[0]) - (e.peer_tx[0] - e.peer_rx[0]))
        rtt = (best.rx[0] - best.tx[0]) - (best.peer_tx[0] - best.peer_rx[0])
        offset = ((best.peer_rx[0] - best.tx[0]) + (best.peer_tx[0] - best.rx[0])) / 2
        return NtpSample(offset, best.tx[0], rtt)


def _tail(points: deque[tuple[int, int, int]], start_ns: int | None = None) -> np.ndarray:
    """The points from start_ns on (all of them: None) as an int64 array (n, 2). Points come in
    time order but for a few stamps out of turn, which only a point at the very edge could miss."""
    if start_ns is None:
        return np.array([p[:2] for p in points], dtype=np.int64).reshape(-1, 2)
    tail = list(itertools.takewhile(lambda p: p[0] >= start_ns, reversed(points)))
    return np.array([p[:2] for p in reversed(tail)], dtype=np.int64).reshape(-1, 2)


def _since(points: np.ndarray, start_ns: int) -> np.ndarray:
    return points[points[:, 0] >= start_ns]


def _middle(fwd: np.ndarray, rev: np.ndarray) -> int:
    xs = np.concatenate([fwd[:, 0], rev[:, 0]])
    return int(xs.min() + (xs.max() - xs.min()) // 2)
