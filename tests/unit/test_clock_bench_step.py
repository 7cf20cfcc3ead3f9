"""bench clocksync's step scenario times re-convergence by when the stepped host's agent
published a good mapping, not by when the watcher (starved on a loaded machine) looked."""

from __future__ import annotations

from clockfabric.bench.clocksync.watch import Watch

STEP = 100 * 10**9
S = 10**9


def watch(samples: list[tuple[float, float, float]]) -> Watch:
    """A watch of host h9 alone: (sampled, published, error) per look, seconds after the step."""
    w = Watch.__new__(Watch)
    w.errors = [(0.0, STEP + round(at * S), "h9", e) for at, _, e in samples]
    w.published = [(STEP + round(pub * S), "h9", e) for _, pub, e in samples]
    return w


def test_a_late_look_at_a_good_state_counts_from_its_publish():
    # the watcher got no core from 1.2 s to 3.4 s; the good state was out at 1.1 s
    looks = [(0.3, 0.2, 1e6), (1.2, 0.9, 1e6), (3.4, 1.1, 40.0), (4.0, 3.9, 60.0), (6.0, 5.9, 30.0)]
    r = watch(looks).reconvergence("h9", STEP)
    assert abs(r["reconverged_s"] - 1.1) < 1e-6
    assert abs(r["sampled_reconverged_s"] - 3.4) < 1e-6


def test_states_published_before_the_step_and_looks_twice_at_one_state():
    looks = [(0.1, -0.5, 1e6), (0.6, 0.5, 1e6), (1.1, 0.5, 1e6), (1.6, 1.4, 900.0), (2.1, 1.4, 950.0),
             (3.0, 2.9, 5_000.0), (3.5, 3.4, 20.0), (6.0, 5.9, 10.0)]
    r = watch(looks).reconvergence("h9", STEP)
    # 1.4 s was within 1 us but 2.9 s was not: settled from 3.4 s
    assert abs(r["reconverged_s"] - 3.4) < 1e-6


def test_never_back_within_the_bound():
    r = watch([(1.0, 0.9, 1e6), (4.0, 3.9, 2_000.0)]).reconvergence("h9", STEP)
    assert r["reconverged_s"] is None and r["sampled_reconverged_s"] is None
