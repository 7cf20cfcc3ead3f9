"""One peer's probe history (clock/pairs.py), fed with exchanges from two simulated clocks.

Real time is a float of ns since EPOCH; each host's clock is an affine function of it (plus
optional steps) read as an integer, exactly as kernel timestamps arrive in an Exchange.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import pytest

from clockfabric.clock import pairs
from clockfabric.clock.fit import fit_band
from clockfabric.clock.pairs import PairWindow, Step
from clockfabric.probe.engine import Exchange

EPOCH = 1_800_000_000_000_000_000
FLOOR_NS = 5_000  # one-way minimum delay, both ways
INTERVAL_NS = 2_000_000  # one exchange every 2 ms


@dataclass(frozen=True)
class TrueClock:
    """reading(tau) = EPOCH + offset + (1 + drift) * tau + the steps that happened by tau."""

    offset_ns: float = 0.0
    drift: float = 0.0
    steps: tuple[tuple[float, int], ...] = ()  # (real time, ns added from then on)

    def exact(self, tau: float) -> float:
        return self.offset_ns + (1 + self.drift) * tau + sum(s for at, s in self.steps if tau >= at)

    def read(self, tau: float) -> int:
        return EPOCH + round(self.exact(tau))

    def real(self, reading: int) -> float:
        """The real time at which this (step-free) clock reads `reading`."""
        assert not self.steps
        return ((reading - EPOCH) - self.offset_ns) / (1 + self.drift)


def theta(ours: TrueClock, peer: TrueClock, t: int) -> float:
    """What the fit estimates: the peer's clock minus ours when ours reads t."""
    tau = ours.real(t)
    return peer.exact(tau) - ours.exact(tau)


def rel_drift(ours: TrueClock, peer: TrueClock) -> float:
    """d(peer - ours) / d(ours)."""
    return (peer.drift - ours.drift) / (1 + ours.drift)


def make_exchange(ours: TrueClock, peer: TrueClock, tau: float, *, gap_ns: float = 10_000,
                  fwd: tuple[float, float] = (FLOOR_NS, FLOOR_NS), rev: tuple[float, float] = (FLOOR_NS, FLOOR_NS),
                  turnaround_ns: float = 20_000, name: str = "b", path: str = "p0") -> Exchange:
    """A coded pair out (sent at real tau and tau + gap, delays `fwd`), the peer's reply pair
    `turnaround_ns` after the second arrives (same gap, delays `rev`), each stamped by its host."""
    out = (tau, tau + gap_ns)
    arrive = (out[0] + fwd[0], out[1] + fwd[1])
    back = (arrive[1] + turnaround_ns, arrive[1] + turnaround_ns + gap_ns)
    home = (back[0] + rev[0], back[1] + rev[1])
    return Exchange(name, path, tuple(ours.read(x) for x in out), tuple(peer.read(x) for x in arrive),
                    tuple(peer.read(x) for x in back), tuple(ours.read(x) for x in home))


@dataclass
class Probe:
    ex: Exchange
    fwd_queued: bool
    rev_queued: bool


def stream(ours: TrueClock, peer: TrueClock, seconds: float, *, seed: int = 0, jitter_ns: float = 200.0,
           queued: float = 0.2, fwd_pure_every: int = 1, start_s: float = 0.0) -> list[Probe]:
    """Exchanges every 2 ms. Unqueued packets see the floor plus uniform jitter below
    `jitter_ns`; a queued pair (probability `queued` each way, and every forward pair not a
    multiple of `fwd_pure_every`) sees an exponential queue that grows by at least 3 us
    between its two packets, well over epsilon, so its gap changes."""
    rng = np.random.default_rng(seed)

    def delays(is_queued: bool) -> tuple[float, float]:
        j = rng.uniform(0, jitter_ns, 2)
        if not is_queued:
            return FLOOR_NS + j[0], FLOOR_NS + j[1]
        q = rng.exponential(20_000)
        return FLOOR_NS + q + j[0], FLOOR_NS + q + 3_000 + rng.exponential(5_000) + j[1]

    out = []
    for k in range(int(seconds * 1e9 / INTERVAL_NS)):
        tau = start_s * 1e9 + k * INTERVAL_NS + rng.uniform(0, 100_000)
        fq = bool(rng.random() < queued) or k % fwd_pure_every != 0
        rq = bool(rng.random() < queued)
        out.append(Probe(make_exchange(ours, peer, tau, fwd=delays(fq), rev=delays(rq)), fq, rq))
    return out


def feed(window: PairWindow, probes: list[Probe], *, refit_every_ns: int = 250_000_000,
         ours: TrueClock | None = None, peer: TrueClock | None = None) -> list[tuple[int, float]]:
    """Add the probes in order, refitting every `refit_every_ns` of our clock as the agent does.
    Returns (our time, fit error in ns) after each refit that gave a fit, if clocks are given."""
    errors = []
    next_fit = probes[0].ex.tx[0] + refit_every_ns
    for p in probes:
        window.add(p.ex)
        now = p.ex.rx[1]
        if now >= next_fit:
            next_fit += refit_every_ns
            fit = window.refit(now)
            if fit is not None and ours is not None:
                errors.append((now, fit.offset_ns - theta(ours, peer, fit.center_ns)))
    return errors


# ---- purity ---------------------------------------------------------------------------------

def test_only_pure_pairs_are_used():
    ours, peer = TrueClock(1_000.0, 20e-6), TrueClock(-7_500_000.0, -45e-6)
    probes = stream(ours, peer, 2.0, seed=1, queued=0.3)
    w = PairWindow("b")
    for p in probes:
        w.add(p.ex)
    want_f = [p.ex.tx[0] for p in probes if not p.fwd_queued]
    want_r = [p.ex.rx[0] for p in probes if not p.rev_queued]
    assert 500 < len(want_f) < 900 and 500 < len(want_r) < 900  # the stream has both kinds
    assert w.seen == len(probes) == 1000
    assert (w.pure_fwd, w.pure_rev) == (len(want_f), len(want_r))
    assert [x for x, _, _ in w.fwd] == want_f  # exactly the unqueued pairs, in order
    assert [x for x, _, _ in w.rev] == want_r
    # the points are (t, r - t) and (r', t' - r') of each pair's first packet
    # with the exchange's sequence number (from 1)
    k, first = next((k, p.ex) for k, p in enumerate(probes, 1) if not p.fwd_queued)
    assert w.fwd[0] == (first.tx[0], first.peer_rx[0] - first.tx[0], k)
    k, first = next((k, p.ex) for k, p in enumerate(probes, 1) if not p.rev_queued)
    assert w.rev[0] == (first.rx[0], first.peer_tx[0] - first.rx[0], k)


@pytest.mark.parametrize("change_ns,pure", [(0, True), (999, True), (1_000, True), (1_001, False), (-1_001, False),
                                            (50_000, False)])
def test_purity_threshold_is_epsilon(change_ns, pure):
    """Integer clocks without drift, so the gap change is exactly what the second packet's delay adds."""
    ours, peer = TrueClock(0.0), TrueClock(123_456.0)
    w = PairWindow("b", epsilon_ns=1_000)
    w.add(make_exchange(ours, peer, 1e9, fwd=(FLOOR_NS, FLOOR_NS + change_ns)))
    w.add(make_exchange(ours, peer, 2e9, rev=(FLOOR_NS, FLOOR_NS + change_ns)))
    assert (w.pure_fwd, w.pure_rev) == ((2, 2) if pure else (1, 1))
    assert (len(w.fwd), len(w.rev)) == (w.pure_fwd, w.pure_rev)


# ---- fits -----------------------------------------------------------------------------------

CLOCKS = [  # (ours, peer): offsets up to 50 ms, relative drifts up to 200 ppm
    (TrueClock(0.0, 0.0), TrueClock(0.0, 0.0)),
    (TrueClock(-25_000_000.0, -100e-6), TrueClock(25_000_000.0, 100e-6)),
    (TrueClock(30_000_000.0, 100e-6), TrueClock(-20_000_000.0, -100e-6)),
    (TrueClock(1_234.5, 3e-6), TrueClock(-4_321_987.6, 41.7e-6)),
]


@pytest.mark.parametrize("ours,peer", CLOCKS)
def test_refit_recovers_offset_and_drift(ours, peer):
    probes = stream(ours, peer, 6.0, seed=2, queued=0.3)
    w = PairWindow("b")
    errors = feed(w, probes, ours=ours, peer=peer)
    now = probes[-1].ex.rx[1]
    fit = w.refit(now)
    assert abs(fit.offset_ns - theta(ours, peer, fit.center_ns)) < 20.0
    assert abs(fit.drift - rel_drift(ours, peer)) < 5e-9
    assert abs(fit.margin_ns - FLOOR_NS) < 50.0
    # offset from the last window only: ~1000 exchanges, 70% pure each way
    assert 600 < fit.n_fwd < 800 and 600 < fit.n_rev < 800
    assert now - w.window_ns < fit.center_ns < now
    # every refit once there is half a second of data was already good
    late = [abs(e) for t, e in errors if t > probes[0].ex.tx[0] + 500_000_000]
    assert len(late) >= 20 and max(late) < 50.0
    assert w.steps == 0


def slope_fits(monkeypatch, now: list[int]) -> list[int]:
    """Each fit of a pair's slope over its history (not a band at a given slope), from now on,
    as the time `now[0]` held when it was made."""
    made: list[int] = []
    fit_band = pairs.fit_band

    def counted(*args, **kwargs):
        if "drift" not in kwargs:
            made.append(now[0])
        return fit_band(*args, **kwargs)

    monkeypatch.setattr(pairs, "fit_band", counted)
    return made


def test_the_drift_is_refitted_as_its_history_grows_by_an_eighth_and_the_offset_at_every_refit(monkeypatch):
    """The drift's fit over the whole history is the costly one, and a second of new points
    moves a slope fitted over many windows by little: it is redone once the history has grown
    by an eighth. Over the first seconds that is at every refit: a slope from the first half
    second, kept a window, is what a starting host's offset would be carried by. The offset's
    fit, over the last window at that drift, follows every refit."""
    ours, peer = CLOCKS[3]
    probes = stream(ours, peer, 8.0, seed=4, queued=0.3)
    w = PairWindow("b")
    now, refits, fits = [0], [], []
    drift_fits = slope_fits(monkeypatch, now)
    start = next_fit = probes[0].ex.tx[0]
    for p in probes:
        w.add(p.ex)
        if p.ex.rx[1] >= next_fit:
            now[0], next_fit = p.ex.rx[1], next_fit + 250_000_000
            refits.append(now[0])
            if (fit := w.refit(now[0])) is not None:
                fits.append(fit)
    first_window = [t for t in refits if t - start < w.window_ns]
    assert len(first_window) == 8 and [t for t in drift_fits if t - start < w.window_ns] == first_window
    # never sooner than an eighth of the history held (the first exchange's to now): a second
    # apart by the end
    assert all(b - a >= (b - start) // 8 - 10_000_000 for a, b in pairwise(drift_fits))
    assert drift_fits[-1] - drift_fits[-2] >= 750_000_000
    assert all(f.offset_ns != before.offset_ns for before, f in pairwise(fits))
    assert abs(w.fit.drift - rel_drift(ours, peer)) < 5e-9
    assert abs(w.fit.offset_ns - theta(ours, peer, w.fit.center_ns)) < 20.0


def test_after_a_cut_the_drift_is_refitted_once_a_window_at_most(monkeypatch):
    """After a cut the slope from before it stands in, and the fit over the new points waits a
    window: its first points may be a queue's, or an exchange begun before the step."""
    ours, peer = CLOCKS[3]
    probes = stream(ours, peer, 10.0, seed=5, queued=0.3)
    w = PairWindow("b")
    now = [0]
    drift_fits = slope_fits(monkeypatch, now)
    start = next_fit = probes[0].ex.tx[0]
    cut_at = None
    for p in probes:
        w.add(p.ex)
        if cut_at is None and p.ex.tx[0] - start >= 4_000_000_000:
            w.shift(Step(w.seen + 1, p.ex.tx[0], 0.0))  # a step of nothing: only the cut counts
            cut_at = p.ex.tx[0]
        if p.ex.rx[1] >= next_fit:
            now[0], next_fit = p.ex.rx[1], next_fit + 250_000_000
            w.refit(now[0])
    after = [t for t in drift_fits if t > cut_at]
    assert len(after) >= 2 and all(b - a >= w.window_ns for a, b in pairwise(after))
    assert w.steps == 1 and abs(w.fit.drift - rel_drift(ours, peer)) < 50e-9


def test_refit_is_none_until_both_directions_have_pure_points():
    ours, peer = TrueClock(), TrueClock(5_000_000.0, 10e-6)
    w = PairWindow("b")
    now = 0
    for k in range(200):  # every reply pair queued: no reverse point
        ex = make_exchange(ours, peer, k * INTERVAL_NS, rev=(FLOOR_NS + 30_000, FLOOR_NS + 36_000))
        w.add(ex)
        now = ex.rx[1]
    assert (w.pure_fwd, w.pure_rev) == (200, 0)
    assert w.refit(now) is None
    ex = make_exchange(ours, peer, 200 * INTERVAL_NS)
    w.add(ex)
    fit = w.refit(ex.rx[1])
    assert fit is not None and (fit.n_fwd, fit.n_rev) == (201, 1)
    # with no new points the last fit is kept for up to a window past its centre, then dropped
    assert w.refit(ex.rx[1]) == fit
    # long after its last point the pair has nothing to say
    assert w.refit(ex.rx[1] + 20 * w.window_ns) is None


def test_a_refit_with_no_exchange_since_stands_for_a_window(monkeypatch):
    """A settled pair exchanges every other update or so: a refit with no exchange since the last,
    less than a window later, answers the last one's fit without fitting; an exchange, a window
    gone by, or a clock step fits again."""
    fits = []

    def counted(*args, **kwargs):
        fits.append(1)
        return fit_band(*args, **kwargs)

    monkeypatch.setattr(pairs, "fit_band", counted)
    ours, peer = CLOCKS[1]
    probes = stream(ours, peer, 3.0, seed=2)
    w = PairWindow("b")
    for p in probes:
        w.add(p.ex)
    now = probes[-1].ex.rx[1]
    first = w.refit(now)
    assert first is not None and fits
    fits.clear()
    assert w.refit(now + w.window_ns // 2) is first and not fits  # nothing new: the same answer
    w.add(make_exchange(ours, peer, 3.0e9 + INTERVAL_NS))
    assert w.refit(now + w.window_ns // 2) is not first and fits  # an exchange: fitted afresh
    fits.clear()
    again = w.refit(now + w.window_ns // 2)
    assert not fits
    assert w.refit(now + w.window_ns // 2 + w.window_ns) is not again and fits  # a window on: fitted afresh
    fits.clear()
    w.refit(now + 2 * w.window_ns)
    assert not fits
    w.shift(Step(w.seen, now, 50_000.0))  # a step the host knows: fitted afresh (the moved fit stands in)
    w.refit(now + 2 * w.window_ns)
    assert fits


# ---- clock steps ----------------------------------------------------------------------------

STEP_AT_S = 5.0

def _step_run(step_ns: int, *, queued: float = 0.2, fwd_pure_every: int = 1, seed: int = 3):
    """5 s of history, the peer steps, 100 ms of probes with no refit (the detector only needs
    the last fit), then 4 s more. Returns the window, fit errors, the step in our clock, and
    the step count after those 100 ms. Checking the count before refitting keeps a missed step
    cheap: refits over clouds that overlap drop points one by one, seconds per refit."""
    ours = TrueClock(-1_000_000.0, -30e-6)
    peer = TrueClock(8_000_000.0, 55e-6, steps=((STEP_AT_S * 1e9, step_ns),))
    probes = stream(ours, peer, 9.0, seed=seed, queued=queued, fwd_pure_every=fwd_pure_every)
    step_local = ours.read(STEP_AT_S * 1e9)
    w = PairWindow("b")
    pre = [p for p in probes if p.ex.tx[0] < step_local - 1_000_000]  # a margin for the exchange in flight
    quiet = [p for p in probes if step_local - 1_000_000 <= p.ex.tx[0] < step_local + 100_000_000]
    errors = feed(w, pre, ours=ours, peer=peer)
    for p in quiet:
        w.add(p.ex)
    steps_seen = w.steps
    if steps_seen == 1:
        errors += feed(w, probes[len(pre) + len(quiet):], ours=ours, peer=peer)
    return w, errors, step_local, steps_seen


def _assert_step_handled(w, errors, step_local, steps_seen) -> None:
    assert steps_seen == 1  # detected within 100 ms of the step
    assert w.steps == 1  # and only once
    before = [abs(e) for t, e in errors if t < step_local]
    after = [abs(e) for t, e in errors if t > step_local + w.window_ns]  # within one window of the step
    assert len(before) >= 15 and max(before[2:]) < 50.0
    assert len(after) >= 8 and max(after) < 50.0  # the new offset
    # everything before the step is forgotten (the detector cuts at the first violating point)
    assert min(x for x, _, _ in w.fwd) > step_local - 5 * INTERVAL_NS
    assert min(x for x, _, _ in w.rev) > step_local - 5 * INTERVAL_NS


@pytest.mark.parametrize("step_ns", [1_000_000, -1_000_000])
def test_a_peer_clock_step_is_detected_and_the_fit_reconverges(step_ns):
    """A loaded stream: a fifth of the pairs each way are queued (impure)."""
    _assert_step_handled(*_step_run(step_ns))


def test_a_step_is_detected_when_the_breaking_direction_is_the_dense_one():
    """Only one forward pair in ten is pure; a +1 ms peer step pushes the reverse points through
    the band, and those come in a row."""
    _assert_step_handled(*_step_run(1_000_000, fwd_pure_every=10))


@pytest.mark.parametrize("step_ns,queued,fwd_pure_every", [
    (1_000_000, 0.0, 1),  # idle network: both directions all pure
    (-1_000_000, 0.0, 1),
    (-1_000_000, 0.2, 10),  # the breaking (forward) points are sparse, reverse ones fall between
])
def test_a_peer_clock_step_is_detected_when_the_other_direction_is_pure_in_between(step_ns, queued, fwd_pure_every):
    _assert_step_handled(*_step_run(step_ns, queued=queued, fwd_pure_every=fwd_pure_every))


@pytest.mark.parametrize("fwd_pure_every", [1, 10])
def test_no_false_step_on_a_clean_stream(fwd_pure_every):
    """Sub-microsecond jitter and queued pairs, 12 s: never a step, and the fit stays good."""
    ours, peer = TrueClock(3_000_000.0, 80e-6), TrueClock(-2_000_000.0, -90e-6)
    probes = stream(ours, peer, 12.0, seed=4, jitter_ns=900.0, queued=0.4, fwd_pure_every=fwd_pure_every)
    w = PairWindow("b")
    errors = feed(w, probes, ours=ours, peer=peer)
    assert w.steps == 0
    assert len(errors) >= 40
    assert max(abs(e) for _, e in errors[4:]) < 100.0
    assert abs(w.fit.drift - rel_drift(ours, peer)) < 1e-8


# ---- the NTP baseline -----------------------------------------------------------------------

def test_ntp_takes_the_min_rtt_sample_and_is_off_by_half_its_asymmetry():
    ours, peer = TrueClock(500.0, 12e-6), TrueClock(-9_876_543.0, -61e-6)
    rng = np.random.default_rng(5)
    w = PairWindow("b")
    assert w.ntp() is None
    exchanges = []
    for k in range(300):  # symmetric-ish queues, round trips of 20 us and more
        f, r = FLOOR_NS + 5_000 + rng.exponential(30_000), FLOOR_NS + 5_000 + rng.exponential(30_000)
        exchanges.append(make_exchange(ours, peer, k * INTERVAL_NS, fwd=(f, f), rev=(r, r)))
    # the best round trip (14 us) is lopsided: 11 us out, 3 us back
    best = make_exchange(ours, peer, 123.4 * INTERVAL_NS, fwd=(11_000, 11_000), rev=(3_000, 3_000))
    exchanges.insert(150, best)
    for ex in exchanges:
        w.add(ex)
    s = w.ntp()
    assert s.at_ns == best.tx[0]
    assert abs(s.rtt_ns - 14_000) <= 3  # in our clock: drift adds under a ns
    # offset error: half the asymmetry, (11 - 3) / 2 us; measured against theta midway through the exchange
    mid = (best.tx[0] + best.rx[0]) // 2
    assert s.offset_ns - theta(ours, peer, mid) == pytest.approx(4_000, abs=3.0)


def test_after_a_step_the_first_fits_keep_the_drift_the_step_did_not_change():
    """Right after a step the pair has under 0.1 s of new points, too little to pin a slope:
    the fit keeps the drift it had, not zero (which would be 85 ppm off here)."""
    ours = TrueClock(-1_000_000.0, -30e-6)
    peer = TrueClock(8_000_000.0, 55e-6, steps=((STEP_AT_S * 1e9, 1_000_000),))
    probes = stream(ours, peer, 6.0, seed=3, queued=0.2)
    step_local = ours.read(STEP_AT_S * 1e9)
    w = PairWindow("b")
    feed(w, [p for p in probes if p.ex.tx[0] < step_local - 1_000_000], ours=ours, peer=peer)
    drift_before = w.fit.drift
    soon = [p for p in probes if step_local - 1_000_000 <= p.ex.tx[0] < step_local + 80_000_000]
    for p in soon:
        w.add(p.ex)
    assert w.steps == 1 and w.fit is None
    fit = w.refit(soon[-1].ex.rx[1])
    assert fit.drift == drift_before
    assert abs(fit.drift - rel_drift(ours, peer)) < 5e-9
    assert abs(fit.offset_ns - theta(ours, peer, fit.center_ns)) < 100.0


def test_no_step_while_the_first_fits_cannot_pin_the_drift():
    """Clocks 200 ppm apart; the first fit has one pure forward point, so its slope is a guess
    (0) and its line leaves the points at 200 us a second. Points beyond it then are the
    unknown drift, not a step: no history is cut, and once the clouds pin a slope the pair
    fits as usual."""
    ours, peer = TrueClock(0.0, -100e-6), TrueClock(3_000_000.0, 100e-6)
    w = PairWindow("b")
    t = 0.0
    queued = (FLOOR_NS + 20_000, FLOOR_NS + 27_000)  # the gap grows: not pure
    for k in range(5):  # 0.5 s: every forward pair queued but the first
        w.add(make_exchange(ours, peer, t, fwd=(FLOOR_NS, FLOOR_NS) if k == 0 else queued))
        t += 100_000_000
    fit = w.refit(ours.read(t))
    assert fit is not None and not fit.pinned and fit.drift == 0.0
    errors = feed(w, stream(ours, peer, 3.0, seed=6, start_s=t / 1e9), ours=ours, peer=peer)
    assert w.steps == 0
    assert w.fit.pinned and abs(w.fit.drift - rel_drift(ours, peer)) < 5e-9
    assert abs(errors[-1][1]) < 50.0


def soft_floor_stream(ours: TrueClock, peer: TrueClock, seconds: float, *, every_ns: float = 7e8,
                      spread_ns: float = 1_500.0, seed: int = 0) -> list[Probe]:
    """An idle path on software timestamps: every pair pure, each one-way delay the floor plus
    an exponential spread of microseconds (the CPU's work on the way), one exchange every
    `every_ns` (a settled clock's rate to one peer)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(int(seconds * 1e9 / every_ns)):
        f, r = FLOOR_NS + rng.exponential(spread_ns), FLOOR_NS + rng.exponential(spread_ns)
        ex = make_exchange(ours, peer, k * every_ns + rng.uniform(0, 1e8), fwd=(f, f), rev=(r, r))
        out.append(Probe(ex, False, False))
    return out


def test_on_soft_floors_the_middle_comes_from_more_floors_and_the_band_stays_the_windows():
    """The least of a few points of a soft floor sits hundreds of ns above it, each side its own
    way: the middle taken from up to 8 windows, with a drift from 32, is nearer the truth than
    the last 3 windows' alone; the band's width (what names a queued host) is still theirs."""
    ours, peer = TrueClock(0.0, 0.0), TrueClock(4e5, 35e-6)
    errors: dict[str, list[float]] = {"3 windows, drift from 8": [], "default": []}
    for seed in range(4):
        probes = soft_floor_stream(ours, peer, 100.0, seed=seed)
        windows = {"3 windows, drift from 8": PairWindow("b", drift_windows=8, offset_windows=3),
                   "default": PairWindow("b"), "band alone": PairWindow("b", offset_windows=3)}
        for name, window in windows.items():
            errs = feed(window, probes, refit_every_ns=1_000_000_000, ours=ours, peer=peer)
            errors.setdefault(name, []).extend(abs(e) for t, e in errs if t - EPOCH > 40e9)
            fit = window.fit
            assert abs(fit.offset_ns - theta(ours, peer, fit.center_ns)) <= fit.bound_ns()
        wide, band = windows["default"].fit, windows["band alone"].fit
        assert wide.margin_ns == band.margin_ns and wide.reach_ns > 2 * band.reach_ns
    assert np.percentile(errors["default"], 90) < 0.6 * np.percentile(errors["3 windows, drift from 8"], 90)
