"""The network-effect solve on synthetic probe graphs whose truth is known.

Pair fits are made from the clocks themselves (host i reads g + x_i + y_i (g - t0) at global
time g), not from the solver's equations, so a mistake in the model would show here too.
"""

import numpy as np
import pytest

from clockfabric.clock.network import Edges, solve

T0 = 1_700_000_000_000_000_000


def clocks(rng, n: int, reference: int, offset_ns: float = 5e7, drift: float = 1e-4):
    """True offsets (up to +-offset_ns) and drifts (up to +-drift); the reference's are zero."""
    x, y = rng.uniform(-offset_ns, offset_ns, n), rng.uniform(-drift, drift, n)
    x[reference] = y[reference] = 0.0
    return x, y


def peers(rng, hosts: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each host probes k random others of `hosts`."""
    src = np.repeat(hosts, k)
    dst = hosts[(np.searchsorted(hosts, src) + rng.integers(1, len(hosts), len(src))) % len(hosts)]
    return src, dst


def fits(rng, x, y, src, dst, spread_ns: float = 2e9, noise_ns: float = 0.0, drift_noise: float = 0.0) -> Edges:
    """What a perfect pair fit reports for each probe (src's clock at the center, c_dst - c_src
    there, and the slope of that in src's clock), the centers spread over spread_ns, plus noise."""
    g = -rng.uniform(0, spread_ns, len(src))  # global time of each center, from t0
    center = T0 + np.round(x[src] + (1 + y[src]) * g).astype(np.int64)
    g = (center - T0 - x[src]) / (1 + y[src])  # the global time of the rounded center
    a = x[dst] - x[src] + (y[dst] - y[src]) * g + rng.normal(0, noise_ns, len(src))
    b = (y[dst] - y[src]) / (1 + y[src]) + rng.normal(0, drift_noise, len(src))
    return Edges(src, dst, a, b, center, np.ones(len(src)))


@pytest.mark.parametrize("reference", [0, 137, 299])
def test_exact_without_noise(reference):
    """Offsets to 10 ps (the solver stops at 1 ps steps), drifts to 1e-12."""
    rng = np.random.default_rng(reference)
    n = 300
    x, y = clocks(rng, n, reference)
    edges = fits(rng, x, y, *peers(rng, np.arange(n), 10))
    edges.weight = rng.uniform(0.2, 5.0, len(edges))  # weights must not matter when all agree
    sol = solve(n, edges, reference, T0)
    assert sol.kept.all()
    assert sol.parts == 1 and sol.synced().all()
    assert np.abs(sol.offset_ns - x).max() < 0.01
    assert np.abs(sol.drift - y).max() < 1e-12
    assert sol.offset_ns[reference] == 0.0 and sol.drift[reference] == 0.0
    assert np.abs(sol.residual_ns).max() < 0.01


def test_a_close_guess_gives_the_same_solution():
    rng = np.random.default_rng(7)
    n = 300
    x, y = clocks(rng, n, 5)
    edges = fits(rng, x, y, *peers(rng, np.arange(n), 10))
    cold = solve(n, edges, 5, T0)
    warm = solve(n, edges, 5, T0, guess=x + rng.normal(0, 1e4, n))
    assert np.abs(warm.offset_ns - cold.offset_ns).max() < 0.01
    assert np.abs(warm.offset_ns - x).max() < 0.01


def test_noise_averages_out():
    rng = np.random.default_rng(1)
    n = 2000
    x, y = clocks(rng, n, 0)
    edges = fits(rng, x, y, *peers(rng, np.arange(n), 10), noise_ns=100.0, drift_noise=1e-9)
    sol = solve(n, edges, 0, T0)
    err = np.abs(sol.offset_ns - x)
    # each host sits on ~20 edges, so its error is well under one edge's noise
    assert np.median(err) < 40 and err.max() < 200
    assert np.abs(sol.drift - y).max() < 2e-9
    assert sol.kept.all()  # nothing honest is beyond 6 sigma or 1 us
    # no margins given: each host's limit is its path's residuals, at least its own error
    assert (sol.limit_ns >= err - 1).all()


@pytest.mark.parametrize(("n", "k"), [(2000, 10), (300, 10)])
def test_the_bound_covers_the_error_a_few_times_over(n, k):
    """The published bound is statistical: from the loops' residuals, not the paths' sum. It
    covers the error in (nearly) every host, within a small multiple of the p99 error, and never
    beyond the limit. (A few hosts give too few errors for a p99.)"""
    rng = np.random.default_rng(n)
    x, y = clocks(rng, n, 0)
    edges = fits(rng, x, y, *peers(rng, np.arange(n), k), noise_ns=100.0, drift_noise=1e-9)
    sol = solve(n, edges, 0, T0)
    err, bound = np.abs(sol.offset_ns - x)[1:], sol.bound_ns[1:]
    assert np.mean(err <= bound) >= 0.99
    assert np.median(bound) <= 5 * np.percentile(err, 99)  # the target a bound is held to
    assert (bound <= sol.limit_ns[1:]).all()


def test_a_host_whose_pairs_disagree_more_takes_its_own_wider_bound():
    rng = np.random.default_rng(4)
    n = 300
    x, y = clocks(rng, n, 0)
    edges = fits(rng, x, y, *peers(rng, np.arange(n), 10), noise_ns=50.0)
    noisy = (edges.src == 7) | (edges.dst == 7)
    edges.offset_ns[noisy] += rng.normal(0, 400.0, noisy.sum())
    sol = solve(n, edges, 0, T0)
    assert sol.kept[noisy].all()  # within what the solve keeps: noise, not a liar
    assert sol.bound_ns[7] >= 3 * np.median(sol.bound_ns[1:])
    assert abs(sol.offset_ns[7] - x[7]) <= sol.bound_ns[7]


def test_a_graph_without_a_loop_publishes_its_limit():
    """A chain has no redundancy to judge noise by: the statistical bound has nothing to say."""
    rng = np.random.default_rng(5)
    x, y = clocks(rng, 4, 0)
    src, dst = np.array([0, 1, 2]), np.array([1, 2, 3])
    edges = fits(rng, x, y, src, dst, noise_ns=100.0)
    edges.margin_ns = np.full(3, 2_000.0)
    sol = solve(4, edges, 0, T0)
    assert np.isinf(sol.sigma_ns).all()
    assert np.array_equal(sol.bound_ns, sol.limit_ns)
    assert sol.bound_ns[3] >= 6_000.0


def test_liars_are_dropped():
    rng = np.random.default_rng(2)
    n = 2000
    x, y = clocks(rng, n, 42)
    edges = fits(rng, x, y, *peers(rng, np.arange(n), 10), noise_ns=20.0, drift_noise=1e-10)
    m = len(edges)
    liars = rng.choice(m, m // 20, replace=False)  # 5%: asymmetric paths, 2 us to 1 ms
    edges.offset_ns[liars] += rng.choice([-1, 1], len(liars)) * 10 ** rng.uniform(np.log10(2e3), 6, len(liars))
    drift_liars = rng.choice(np.setdiff1d(np.arange(m), liars), m // 100, replace=False)
    edges.drift[drift_liars] += rng.choice([-1, 1], len(drift_liars)) * rng.uniform(5e-6, 5e-5, len(drift_liars))
    sol = solve(n, edges, 42, T0)
    lying = np.zeros(m, dtype=bool)
    lying[liars] = lying[drift_liars] = True
    assert not sol.kept[lying].any()
    assert (~sol.kept[~lying]).sum() <= 0.005 * (~lying).sum()  # few honest edges lost with them
    assert sol.synced().all()
    assert np.abs(sol.offset_ns - x).max() < 60
    assert np.abs(sol.drift - y).max() < 1e-9


def test_two_parts_each_consistent():
    rng = np.random.default_rng(3)
    n = 400
    near, far = np.arange(1, n, 2), np.arange(0, n, 2)  # odd hosts hold the reference
    reference = 51
    x, y = clocks(rng, n, reference)
    src, dst = np.concatenate([peers(rng, near, 8), peers(rng, far, 8)], axis=1)
    sol = solve(n, fits(rng, x, y, src, dst), reference, T0)
    assert sol.parts == 2
    assert sol.synced()[near].all() and not sol.synced()[far].any()
    assert len(set(sol.component[far])) == 1
    assert np.abs(sol.offset_ns[near] - x[near]).max() < 0.01
    assert np.abs(sol.drift[near] - y[near]).max() < 1e-12
    # The far part cannot know global time: it is solved in the time of one of its own hosts,
    # held at zero. Restated in that host's time, the truth must come out exactly.
    anchor = far[sol.offset_ns[far] == 0.0]
    assert len(anchor) == 1
    a = anchor[0]
    y_far = (1 + y[far]) / (1 + y[a]) - 1
    x_far = x[far] - x[a] * (1 + y[far]) / (1 + y[a])
    assert np.abs(sol.offset_ns[far] - x_far).max() < 0.01
    assert np.abs(sol.drift[far] - y_far).max() < 1e-12


def test_host_without_edges_is_unsynced():
    rng = np.random.default_rng(4)
    n = 60
    x, y = clocks(rng, n, 3)
    hosts = np.setdiff1d(np.arange(n), [17])
    sol = solve(n, fits(rng, x, y, *peers(rng, hosts, 6)), 3, T0)
    assert sol.parts == 2
    assert not sol.synced()[17] and sol.synced()[hosts].all()
    assert sol.offset_ns[17] == 0.0 and np.isnan(sol.bound_ns[17])
    assert np.abs(sol.offset_ns[hosts] - x[hosts]).max() < 0.01

