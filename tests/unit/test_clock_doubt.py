"""Our own clock in doubt (clock/sync.py HostSync.doubt): once pairs break their bands together,
the mapping served is widened until a map solved from sure pairs comes back; a peer's fault,
which breaks one pair, widens nothing."""

from __future__ import annotations

import pytest

from clockfabric.clock.fit import MAX_SLOPE
from clockfabric.clock.mapping import Mapping
from clockfabric.clock.sync import HostSync
from tests.unit.test_host_steps import PEERS, STEP_AT_S, RateChangingClock, clocks, error_at, exchanges, warmed
from tests.unit.test_pair_window import EPOCH, TrueClock

ROUND_NS = 175_000_000  # each pair every 0.7 s: the quiet rate at 8 hosts


def exact_map(ours: TrueClock, host: str = "me") -> dict:
    """The solver's map that reads our (unfaulted) clock exactly: global time is EPOCH + tau."""
    mapping = Mapping(EPOCH, ours.offset_ns, ours.drift, 50.0, drift_bound=20e-9)
    return {"t": "map", "hosts": {host: mapping.as_dict()}, "parts": 1}


def error_ns(sync: HostSync, ours: TrueClock, tau_ns: float) -> float:
    return sync.mapping.global_ns(ours.read(tau_ns)) - (EPOCH + tau_ns)


@pytest.mark.parametrize("jump", [500e-6, -500e-6])
def test_our_rate_changing_widens_the_bound_over_the_error_until_a_new_map(jump):
    base, peers = clocks()
    ours = RateChangingClock(base.offset_ns, base.drift, at_ns=STEP_AT_S * 1e9, jump=jump)
    sync = warmed(ours, peers, round_ns=ROUND_NS)
    sync.on_map(exact_map(base))
    solved = sync.mapping
    assert not sync.doubted and abs(error_ns(sync, ours, STEP_AT_S * 1e9)) < 100
    doubted_at = None
    for ex in exchanges(ours, peers, STEP_AT_S, STEP_AT_S + 3.0, round_ns=ROUND_NS):
        sync.add([ex])
        tau = ex.rx[1] - EPOCH - ours.offset_ns  # about the real time, to a few ms
        if sync.doubted and doubted_at is None:
            doubted_at = tau
        if doubted_at is not None:  # from the moment it knows, its bound covers what it serves
            assert abs(error_ns(sync, ours, tau)) <= sync.mapping.bound_at(ours.read(tau)), tau
    # two pairs broke within two rounds of the change
    assert doubted_at is not None and doubted_at - STEP_AT_S * 1e9 <= 2 * len(PEERS) * ROUND_NS
    # what it serves is still the solver's line, only its bound wider
    assert (sync.mapping.offset_ns, sync.mapping.drift, sync.mapping.t0_ns) == (solved.offset_ns, solved.drift,
                                                                                solved.t0_ns)
    assert sync.mapping.drift_bound >= MAX_SLOPE and sync.mapping.uncertainty_ns > solved.uncertainty_ns


def test_the_doubt_ends_with_a_map_solved_after_the_pairs_are_sure_again():
    ours, peers = clocks(ours_steps=[(STEP_AT_S * 1e9, 1_000_000)])
    sync = warmed(ours, peers)
    sync.on_map(exact_map(ours))
    feed = exchanges(ours, peers, STEP_AT_S, STEP_AT_S + 2.0)
    for ex in feed[:2]:  # two pairs break alike: our step, every pair shifted
        sync.add([ex])
    assert sync.own_steps == 1 and sync.doubted
    assert sync.mapping.uncertainty_ns >= 50.0 + 0.9e6  # the step's size, until a map says more
    early = exact_map(ours)  # solved before the pairs were sure again: still widened
    sync.on_map(early)
    assert sync.doubted and sync.mapping.uncertainty_ns > 0.9e6
    for ex in feed[2:]:
        sync.add([ex])
        sync.report(ex.rx[1])
    assert not any(p.unsure for p in sync.pairs.values())
    late = exact_map(ours)
    late["hosts"]["me"]["t0_ns"] = feed[-1].rx[1]
    sync.on_map(late)
    assert not sync.doubted and sync.mapping.uncertainty_ns == 50.0 and sync.mapping.drift_bound == 20e-9


def test_a_peer_changing_rate_or_stepping_breaks_one_pair_and_widens_nothing():
    for fault in ("rate", "step"):
        ours, peers = clocks(peer_steps={"p2": [(STEP_AT_S * 1e9, 1_000_000)]} if fault == "step" else None)
        if fault == "rate":
            p2 = peers["p2"]
            peers["p2"] = RateChangingClock(p2.offset_ns, p2.drift, at_ns=STEP_AT_S * 1e9, jump=500e-6)
        sync = warmed(ours, peers)
        sync.on_map(exact_map(ours))
        solved = sync.mapping
        broke = False
        for ex in exchanges(ours, peers, STEP_AT_S, STEP_AT_S + 3.0):
            sync.add([ex])
            broke |= sync.pairs["p2"].unsure
            assert not sync.doubted and sync.mapping == solved, fault
        assert broke, fault  # the pair did see it


@pytest.mark.parametrize("step_ns", [50_000_000, -1_000_000])
def test_our_clock_saying_it_was_set_widens_at_once_and_one_pair_breaking_moves_them_all(step_ns):
    """The clock itself tells the step (HostClock.set_ns) before any pair has a point past it:
    the mapping served covers the error from then on, the first pair to break by the step moves
    every pair with it (its size the clock's), the neighbours are told, and the pairs' later
    points find no step of their own."""
    ours, peers = clocks(ours_steps=[(STEP_AT_S * 1e9, step_ns)])
    sync = warmed(ours, peers)
    sync.on_map(exact_map(clocks()[0]))
    feed = exchanges(ours, peers, STEP_AT_S, STEP_AT_S + 2.0)
    sync.clock_set(step_ns, ours.read(STEP_AT_S * 1e9 + 1e6))
    assert sync.doubted and sync.own_steps == 0
    for k, ex in enumerate(feed):
        sync.add([ex])
        sync.report(ex.rx[1])
        if k == 0:  # one pair's first point past the step: every pair moved, by the clock's size
            assert sync.own_steps == 1 and sync.told == [-step_ns] and all(p.steps == 1 for p in sync.pairs.values())
        tau = ex.rx[1] - EPOCH - ours.offset_ns - step_ns
        assert abs(error_ns(sync, ours, tau)) <= sync.mapping.bound_at(ours.read(tau)), tau
    assert sync.own_steps == 1 and all(p.steps == 1 for p in sync.pairs.values())
    for name in PEERS:
        assert abs(error_at(sync, ours, peers[name], name, (STEP_AT_S + 2.0) * 1e9)) < 1_000, name
