"""Clock steps as a host sees them (clock/sync.py HostSync over clock/pairs.py): our own
step is told apart from a peer's by several pairs breaking alike, and every pair shifts at
once; a peer's word shifts the one pair with it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from clockfabric.clock.sync import HostSync
from tests.unit.test_pair_window import FLOOR_NS, TrueClock, make_exchange

PEERS = ["p1", "p2", "p3", "p4"]
STEP_AT_S = 6.0
ROUND_NS = 50_000_000  # one exchange every 50 ms, peers in turn: each pair every 200 ms


def clocks(ours_steps=(), peer_steps=None) -> tuple[TrueClock, dict[str, TrueClock]]:
    ours = TrueClock(-2_000_000.0, -30e-6, steps=tuple(ours_steps))
    peers = {p: TrueClock(1_000_000.0 * k, 10e-6 * k, steps=tuple((peer_steps or {}).get(p, ())))
             for k, p in enumerate(PEERS, 1)}
    return ours, peers


def exchanges(ours: TrueClock, peers: dict[str, TrueClock], start_s: float, end_s: float, *, seed: int = 0,
              jitter_ns: float = 300.0, round_ns: int = ROUND_NS):
    """Unqueued exchanges with sub-microsecond jitter, the peers in turn, one every `round_ns`."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(int(start_s * 1e9 / round_ns), int(end_s * 1e9 / round_ns)):
        name = PEERS[k % len(PEERS)]
        j = rng.uniform(0, jitter_ns, 4)
        out.append(make_exchange(ours, peers[name], k * round_ns, name=name,
                                 fwd=(FLOOR_NS + j[0], FLOOR_NS + j[0]), rev=(FLOOR_NS + j[1], FLOOR_NS + j[1])))
    return out


def warmed(ours, peers, *, until_s: float = STEP_AT_S - 0.01, round_ns: int = ROUND_NS) -> HostSync:
    """A host that has probed its peers until just before the step, reporting every second."""
    sync = HostSync("me", PEERS)
    next_report = 1e9
    for ex in exchanges(ours, peers, 0.0, until_s, round_ns=round_ns):
        sync.add([ex])
        if ex.tx[0] - ours.read(0) >= next_report:
            sync.report(ex.rx[1])
            next_report += 1e9
    sync.report(ours.read(until_s * 1e9))
    return sync


def error_at(sync: HostSync, ours: TrueClock, peer: TrueClock, name: str, tau_ns: float) -> float:
    """The pair's fit against the truth at real time tau (any clock steps included)."""
    return sync.pairs[name].fit.at(ours.read(tau_ns)) - (peer.exact(tau_ns) - ours.exact(tau_ns))


@pytest.mark.parametrize("step_ns", [1_000_000, -1_000_000])
def test_our_own_step_shifts_every_pair_after_two_peers_break(step_ns):
    ours, peers = clocks(ours_steps=[(STEP_AT_S * 1e9, step_ns)])
    sync = warmed(ours, peers)
    assert all(p.fit is not None for p in sync.pairs.values())
    before = {n: p.seen for n, p in sync.pairs.items()}
    after = exchanges(ours, peers, STEP_AT_S, STEP_AT_S + 1.0)
    taken = 0
    for ex in after:
        sync.add([ex])
        taken += 1
        if sync.own_steps:
            break
    # two exchanges after the step, each with another peer: no pair has seen two breaks yet
    assert taken == 2 and sync.own_steps == 1
    assert sync.told == [pytest.approx(-step_ns, abs=1_000)]
    assert all(p.steps == 1 for p in sync.pairs.values())
    # every pair, even those with no point since the step, stands in with its fit moved by it
    for name in PEERS:
        assert abs(error_at(sync, ours, peers[name], name, STEP_AT_S * 1e9 + 1e6)) < 1_000, name
    report = sync.report(after[taken - 1].rx[1])
    assert report["urgent"] is True and len(report["edges"]) == len(PEERS)
    assert "urgent" not in sync.report(after[taken - 1].rx[1])  # once
    # the pairs go on from new points only, each having stepped once
    for ex in after[taken:]:
        sync.add([ex])
    sync.report(after[-1].rx[1])
    assert sync.own_steps == 1 and all(p.steps == 1 for p in sync.pairs.values())
    for name, pair in sync.pairs.items():
        assert min(seq for _, _, seq in [*pair.fwd, *pair.rev]) > before[name]  # nothing from before the step
        assert abs(error_at(sync, ours, peers[name], name, (STEP_AT_S + 0.9) * 1e9)) < 1_000, name


def test_after_a_step_the_pairs_keep_their_drift_while_the_new_points_allow_it():
    """A step moves the offset, not the rate: the few exchanges since it (under a second of
    them, at the hurried rate) pin a slope only to a few ppm, and the drift from before the
    step stands while they allow it, so the clock does not run off by microseconds a second."""
    ours, peers = clocks(ours_steps=[(STEP_AT_S * 1e9, 1_000_000)])
    sync = warmed(ours, peers)
    for k, ex in enumerate(exchanges(ours, peers, STEP_AT_S, STEP_AT_S + 1.2, jitter_ns=1_000.0, seed=5)):
        sync.add([ex])
        if k % 4 == 3:
            sync.report(ex.rx[1])
            for name, peer in peers.items():
                fit = sync.pairs[name].fit
                if fit is not None:
                    truth = (peer.drift - ours.drift) / (1 + ours.drift)
                    assert abs(fit.drift - truth) < 20e-9, (name, k, fit.drift - truth)
    assert sync.own_steps == 1 and all(p.steps == 1 and p.fit.pinned for p in sync.pairs.values())


@dataclass(frozen=True)
class RateChangingClock(TrueClock):
    """A TrueClock whose rate moves by `jump` (relative) at real time `at_ns`, without a step."""

    at_ns: float = 0.0
    jump: float = 0.0

    def exact(self, tau: float) -> float:
        return super().exact(tau) + self.jump * max(0.0, tau - self.at_ns)


@pytest.mark.parametrize("jump", [500e-6, -500e-6])
def test_our_clock_changing_rate_is_one_break_and_the_new_rate_fitted(jump):
    """A failing oscillator: our clock runs 500 ppm off from one moment, without a step. Every
    pair breaks its band, one after another and by more each time: a ramp, not a run of
    steps. Each pair cuts once, at its break or with our own step, and fits the new rate from
    the points after it: at the idle rate of one exchange a pair every 1.4 s, every pair holds
    the new rate 4.5 s after the change."""
    round_ns = 350_000_000
    base, peers = clocks()
    ours = RateChangingClock(base.offset_ns, base.drift, at_ns=STEP_AT_S * 1e9, jump=jump)
    sync = warmed(ours, peers, round_ns=round_ns)
    end_s = STEP_AT_S + 4.5
    next_report = (STEP_AT_S + 1.0) * 1e9
    for ex in exchanges(ours, peers, STEP_AT_S, end_s, round_ns=round_ns):
        sync.add([ex])
        if ex.rx[1] - ours.read(0) >= next_report:
            sync.report(ex.rx[1])
            next_report += 1e9
    sync.report(ours.read(end_s * 1e9))
    assert sync.own_steps <= 1
    for name, peer in peers.items():
        pair = sync.pairs[name]
        truth = (peer.drift - base.drift - jump) / (1 + base.drift + jump)
        assert pair.steps == 1, name
        assert pair.fit is not None and pair.fit.pinned, name
        assert abs(pair.fit.drift - truth) < 1e-6, (name, pair.fit.drift, truth)


def test_a_peer_step_shifts_only_that_pair_and_is_not_ours():
    ours, peers = clocks(peer_steps={"p2": [(STEP_AT_S * 1e9, 1_000_000)]})
    sync = warmed(ours, peers)
    for ex in exchanges(ours, peers, STEP_AT_S, STEP_AT_S + 2.0):
        sync.add([ex])
    assert sync.own_steps == 0 and sync.told == []
    assert {n: p.steps for n, p in sync.pairs.items()} == {"p1": 0, "p2": 1, "p3": 0, "p4": 0}


def test_a_peer_that_says_it_stepped_moves_our_pair_with_it_at_once():
    ours, peers = clocks(peer_steps={"p3": [(STEP_AT_S * 1e9, 1_000_000)]})
    sync = warmed(ours, peers)
    sync.report(0)
    # p3 tells us before any of our points shows it: its view of us minus it moved by -1 ms
    sync.on_stepped("p3", -1_000_000.0)
    pair = sync.pairs["p3"]
    assert pair.steps == 1 and not pair.fwd and not pair.rev
    truth = peers["p3"].exact(STEP_AT_S * 1e9 + 1) - ours.exact(STEP_AT_S * 1e9 + 1)
    assert abs(pair.fit.at(ours.read(STEP_AT_S * 1e9 + 1)) - truth) < 1_000
    assert sync.report(ours.read(STEP_AT_S * 1e9))["urgent"] is True
    # our own points then agree with it: no second step, and told again changes nothing
    for ex in exchanges(ours, peers, STEP_AT_S, STEP_AT_S + 2.0):
        sync.add([ex])
    sync.on_stepped("p3", -1_000_000.0)
    assert pair.steps == 1 and sync.own_steps == 0
    assert sync.on_stepped("nobody", 5.0) is None  # a host we do not probe: nothing to shift


def test_no_own_step_on_a_clean_stream_with_late_timestamps():
    """Now and then one forward timestamp pair is 30 us late in one pair (a CPU stall): a
    single pair's break, never matched by another's, is not a step of ours."""
    ours, peers = clocks()
    sync = warmed(ours, peers)
    rng = np.random.default_rng(9)
    for ex in exchanges(ours, peers, STEP_AT_S, STEP_AT_S + 10.0, seed=3):
        if rng.random() < 0.05:  # our send stamps late: the point drops 30-60 us below the floor
            late = int(rng.uniform(30_000, 60_000))
            ex = type(ex)(ex.peer, ex.path, (ex.tx[0] + late, ex.tx[1] + late), ex.peer_rx, ex.peer_tx, ex.rx)
        sync.add([ex])
        sync.report(ex.rx[1])
    assert sync.own_steps == 0
    assert all(p.steps == 0 for p in sync.pairs.values())


def _mapped(sync: HostSync) -> None:
    hosts = {h: {"t0_ns": 0, "offset_ns": 0.0, "drift": 0.0, "uncertainty_ns": 10.0} for h in ["me", *PEERS]}
    sync.on_map({"t": "map", "hosts": hosts, "parts": 1})


def test_settled_only_when_mapped_calm_and_mostly_pure():
    ours, peers = clocks(ours_steps=[(20e9, 1_000_000)])
    sync = HostSync("me", PEERS)
    feed = exchanges(ours, peers, 0.0, 30.0)
    decisions = []
    for k, ex in enumerate(feed):
        sync.add([ex])
        if k == 40:
            _mapped(sync)
        if k % 20 == 19:  # once a second
            sync.report(ex.rx[1])
            decisions.append((ex.rx[1], sync.settled(ex.rx[1])))
    t0 = ours.read(0)
    seconds = [((t - t0) / 1e9, d) for t, d in decisions]
    # not before a mapping, nor for five windows (10 s) of calm after it; then settled until
    # our clock steps at 20 s, and calm again only 10 s after that
    assert not any(d for s, d in seconds if s < 12.0)
    assert all(d for s, d in seconds if 13.0 < s < 20.0)
    assert not any(d for s, d in seconds if 20.0 < s < 30.0)
    assert sync.own_steps == 1


def settled_each_second(queued) -> list[bool]:
    """HostSync.settled once a second over 20 s of exchanges, mapped after the 40th; those for which
    `queued(k)` holds have their forward pair's second packet 5 us late (it met a queue)."""
    ours, peers = clocks()
    sync = HostSync("me", PEERS)
    settled = []
    for k, ex in enumerate(exchanges(ours, peers, 0.0, 20.0)):
        if queued(k):
            ex = type(ex)(ex.peer, ex.path, ex.tx, (ex.peer_rx[0], ex.peer_rx[1] + 5_000), ex.peer_tx, ex.rx)
        sync.add([ex])
        if k == 40:
            _mapped(sync)
        if k % 20 == 19:
            sync.report(ex.rx[1])
            settled.append(sync.settled(ex.rx[1]))
    return settled


def test_not_settled_when_probes_meet_queues():
    rng = np.random.default_rng(2)
    settled = settled_each_second(lambda _k: rng.random() < 0.8)  # most forward pairs queued
    assert len(settled) == 20 and not any(settled)


def test_not_settled_when_only_the_forward_packets_meet_a_queue():
    """A host sending into a filled link: half its forward pairs queued (the paths over that link),
    every reply pure. Three pure packets in four overall, but the queue is there one way."""
    settled = settled_each_second(lambda k: k % 2 == 1)
    assert len(settled) == 20 and not any(settled)


def test_settled_at_the_quiet_rate_though_an_update_sees_a_queued_pair_among_few():
    """At the quiet rate an update sees two or three exchanges: one queued pair among them is
    not a busy fabric, and must not send the host back to the full rate (nor restart its calm)."""
    ours, peers = clocks()
    sync = HostSync("me", PEERS)
    feed = []
    for k in range(int(30e9 / 450_000_000)):  # an exchange every 450 ms, the peers in turn: each every 1.8 s
        name, queued = PEERS[k % len(PEERS)], k % 7 == 3  # one in seven queued both ways
        delay = (FLOOR_NS, FLOOR_NS + 5_000) if queued else (FLOOR_NS, FLOOR_NS)
        feed.append(make_exchange(ours, peers[name], k * 450_000_000, name=name, fwd=delay, rev=delay))
    decisions, next_s = [], 1.0
    for ex in feed:
        sync.add([ex])
        if ex.tx[0] - ours.read(0) >= 2e9 and sync.mapping is None:
            _mapped(sync)
        if ex.tx[0] - ours.read(0) >= next_s * 1e9:
            sync.report(ex.rx[1])
            decisions.append((next_s, sync.settled(ex.rx[1])))
            next_s += 1.0
    assert not any(d for s, d in decisions if s < 12.0)  # five windows of calm first
    assert all(d for s, d in decisions if s > 15.0)


def test_after_our_step_each_pair_reports_again_as_soon_as_it_has_new_points_both_ways():
    ours, peers = clocks(ours_steps=[(STEP_AT_S * 1e9, 1_000_000)])
    sync = warmed(ours, peers)
    after = exchanges(ours, peers, STEP_AT_S, STEP_AT_S + 1.0)
    urgent_at = []
    for k, ex in enumerate(after):
        sync.add([ex])
        if sync.urgent:
            urgent_at.append(k)
            sync.report(ex.rx[1])
    assert sync.own_steps == 1 and not any(p.provisional for p in sync.pairs.values())
    # the step (2nd exchange), then each pair once its next exchange brings points both ways
    assert urgent_at[0] == 1 and len(urgent_at) == 1 + len(PEERS)
    assert urgent_at[-1] <= 1 + 2 * len(PEERS)
