"""A clock step is seen in queued probes too: a queued packet arrives late, never early, so
one that lands beyond the band's floor broke it as surely as a pure one (clock/pairs.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.test_host_steps import PEERS, ROUND_NS, STEP_AT_S, clocks, warmed
from tests.unit.test_pair_window import FLOOR_NS, TrueClock, make_exchange

QUEUE_NS = 30_000  # a few packets of standing queue ahead of each probe
SPREAD_NS = 5_000  # the queue grew between a pair's two packets: neither point is pure


def queued_exchanges(ours: TrueClock, peers: dict[str, TrueClock], start_s: float, end_s: float, *, seed: int = 0):
    """Exchanges with every packet queued in both directions, the peers in turn."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(int(start_s * 1e9 / ROUND_NS), int(end_s * 1e9 / ROUND_NS)):
        name = PEERS[k % len(PEERS)]
        q = rng.uniform(0, QUEUE_NS, 2)
        fwd = (FLOOR_NS + q[0], FLOOR_NS + q[0] + SPREAD_NS)
        rev = (FLOOR_NS + q[1], FLOOR_NS + q[1] + SPREAD_NS)
        out.append(make_exchange(ours, peers[name], k * ROUND_NS, name=name, fwd=fwd, rev=rev))
    return out


@pytest.mark.parametrize("step_ns", [1_000_000, -1_000_000])
def test_our_step_is_seen_in_queued_probes_within_two_exchanges(step_ns):
    ours, peers = clocks(ours_steps=[(STEP_AT_S * 1e9, step_ns)])
    sync = warmed(ours, peers)
    after = queued_exchanges(ours, peers, STEP_AT_S, STEP_AT_S + 1.0)
    taken = 0
    for ex in after:
        sync.add([ex])
        taken += 1
        if sync.own_steps:
            break
    assert sync.own_steps == 1 and taken == 2
    # the size comes from the deepest break seen: short of the step by at most the queue
    assert abs(sync.told[0] + step_ns) <= QUEUE_NS + 1_000


def test_queued_probes_without_a_step_break_nothing():
    ours, peers = clocks()
    sync = warmed(ours, peers)
    for ex in queued_exchanges(ours, peers, STEP_AT_S, STEP_AT_S + 5.0, seed=3):
        sync.add([ex])
    assert sync.own_steps == 0 and all(p.steps == 0 for p in sync.pairs.values())
