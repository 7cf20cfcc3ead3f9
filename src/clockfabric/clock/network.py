"""The network effect: one offset and one drift per host from all pair fits at once.

Around any loop of the probe graph the true offsets sum to zero; measured ones do not,
and the loop's disagreement shows which edges lie (a pair whose minimum delays are not
equal both ways). Weighted least squares over the graph (a sparse Laplacian system, one
reference held at zero per connected part) spreads what is consistent and exposes what
is not: edges with large residuals are dropped and the system solved again.

Model, exactly: host i's clock reads c_i = g + x_i + y_i (g - t0) at global time g, where
global time is the reference host's clock. A pair fit from i's side, theta(c_i) = c_j - c_i,
with value a at i's time C and slope b, then says
    log(1 + b) = log(1 + y_j) - log(1 + y_i)
    x_j - x_i  = a - b (C - t0 - x_i)
The second is linear in x once x_i on its right is known to a few microseconds (its
coefficient is b, below 1e-3), so a few passes from zero make it exact to well under a
nanosecond.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from clockfabric.clock.mapping import DRIFT_BOUND
from clockfabric.errors import ClockfabricError

# The solves stop when no host's Jacobi step (its residual over its diagonal) is above a
# tolerance in the unknown's own unit; it is absolute, so a solve from a close guess ends after a
# few iterations. The final solve goes far below what a pair fit resolves (tens of ns; 1e-9 in
# drift); while edges are being peeled, residuals are only needed to a fraction of outlier_ns.
OFFSET_TOL_NS, LOG_DRIFT_TOL = 1e-3, 1e-13
PEEL_TOL, PEEL_LOG_DRIFT_TOL = 0.01, 1e-10  # the first times outlier_ns
MAX_ITERATIONS = 1000
MAX_PASSES = 6  # of the fixed point in x_i: each gains a factor |b| < 1e-3
# The published bound, in standard errors of a host's offset. A normal error is past 4 in one
# sample in 16,000, but software timestamps have heavier tails, and what no loop sees (a host's
# pairs all off alike) adds to them: at 4, quiet hosts of the lab's 8- and 32-host runs fell to
# 97-99% coverage, one sample out by 1.4 bounds; 5 holds them.
BOUND_Z = 5.0
# The probe graph's diameter (random peers: about log(hosts) / log(peers)); a longer one is
# left to connected_components.
BFS_STEPS = 12


@dataclass
class Edges:
    """Pair fits as parallel arrays (one row per fit; i probed j)."""

    src: np.ndarray  # int
    dst: np.ndarray  # int
    offset_ns: np.ndarray  # a: c_j - c_i at src's time center_ns
    drift: np.ndarray  # b
    center_ns: np.ndarray  # int64, src's clock
    weight: np.ndarray
    # how far each pair's offset can be from the truth (PairFit.bound_ns; None: taken as 0)
    margin_ns: np.ndarray | None = None
    # how far each pair's drift can be from the truth (PairFit.drift_bound; None: DRIFT_BOUND)
    drift_bound: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.src)


@dataclass
class Solution:
    t0_ns: int
    offset_ns: np.ndarray  # x: host clock minus global time, at global time t0
    drift: np.ndarray  # y
    component: np.ndarray  # label per host; hosts with no edge have a part of their own
    reference_component: int
    kept: np.ndarray  # bool per input edge
    residual_ns: np.ndarray  # per input edge, after the final solve
    # per host, at t0 (nan: not synced): its offset is within this of the truth but for the
    # rare sample: the lesser of `limit_ns` and BOUND_Z standard errors from the pivot
    bound_ns: np.ndarray
    drift_bound: np.ndarray  # per host: likewise, for its drift
    # per host: its offset is within this of the truth if every minimum delay is positive
    limit_ns: np.ndarray
    # per host: its offset's standard error (inf: the graph has no loop to judge it by)
    sigma_ns: np.ndarray
    drift_limit: np.ndarray  # per host: likewise, for its drift
    drift_sigma: np.ndarray

    @property
    def parts(self) -> int:
        return int(self.component.max()) + 1 if len(self.component) else 0

    def synced(self) -> np.ndarray:
        """Hosts tied to the reference through kept edges."""
        return self.component == self.reference_component


def solver_installed(host: str) -> None:
    """Refuse to run the reference's agent without SciPy, which only the solver needs (the `solver`
    extra), rather than let it fail at its first solve; imported now, as that solve would."""
    try:
        import scipy.sparse.csgraph  # noqa: F401
    except ImportError:
        raise ClockfabricError(f"{host} is the fleet's clock reference (the fleet file's first host by name, or "
                               "--reference): its agent runs the solver, which needs SciPy; install "
                               "clockfabric-reference here, or pip install 'clockfabric[solver]'") from None


class _System:
    """The weighted graph Laplacian of the kept edges.

    Its sparse structure is built once for all edges; dropping an edge zeroes its two entries
    (rebuilding the matrix each round cost more than the solves). No host is pinned in it: the
    system is singular (any constant can be added within a connected part) but consistent, which
    conjugate gradients handle, and the caller shifts each part to put its anchor at zero.
    Pinning a host in the matrix instead leaves one tiny eigenvalue (about its degree over the
    number of hosts) that costs CG about ten more iterations per solve."""

    def __init__(self, n: int, e: Edges):
        import scipy.sparse as sp  # here, not at the top: only the solver's host pays its import

        m = len(e)
        self.e, self.w = e, e.weight.astype(float)  # w: zero once an edge is dropped
        # Order the 2m off-diagonal entries (-w at (src, dst) and at (dst, src)) by row with
        # scipy's counting sort: a matrix with one entry per row p, at column rows[p], converted
        # to CSC, lists the entries of each column in turn, values and all. That is O(m), where
        # sorting, or converting COO to CSR (which also sorts within each row), is not.
        rows = np.concatenate([e.src, e.dst])
        by_row = sp.csr_matrix((-np.concatenate([self.w, self.w]), rows, np.arange(2 * m + 1)),
                               shape=(2 * m, n)).tocsc()
        # the entry at each place of the matrix: k for edge k's (src, dst), m + k for its (dst, src)
        self.order = by_row.indices
        cols = np.concatenate([e.dst, e.src])[self.order]
        self.offdiag = sp.csr_matrix((by_row.data, cols, by_row.indptr), shape=(n, n))
        self._update_diagonal()

    @cached_property
    def slot(self) -> np.ndarray:
        """Where edge k's two entries sit in the matrix: slot[k] and slot[k + m]."""
        slot = np.empty_like(self.order)
        slot[self.order] = np.arange(len(self.order), dtype=self.order.dtype)
        return slot

    def drop(self, k: np.ndarray) -> None:
        self.w[k] = 0.0
        self.offdiag.data[self.slot[k]] = 0.0
        self.offdiag.data[self.slot[k + len(self.e)]] = 0.0
        self._update_diagonal()

    def _update_diagonal(self) -> None:
        e, n = self.e, self.offdiag.shape[0]
        self.diag = np.bincount(e.src, self.w, n) + np.bincount(e.dst, self.w, n)
        # A host left without edges gets no search direction, so it stays where it was.
        with np.errstate(divide="ignore"):
            self.jacobi = np.where(self.diag > 0, 1.0 / self.diag, 0.0)

    def parts(self, reference: int) -> np.ndarray:
        """Connected part of each host through kept edges, labelled 0, 1, ..."""
        n = len(self.diag)
        # Usually one part holds every host with an edge, which a breadth-first search from the
        # reference (a matrix product per step; kept entries are negative) shows at a fraction
        # of connected_components' cost. Hosts it does not reach then have a part each.
        reached = np.zeros(n)
        reached[reference] = 1.0
        for _ in range(BFS_STEPS):
            grown = np.where(self.offdiag @ reached < 0, 1.0, reached)
            if np.array_equal(grown, reached):
                alone = reached == 0
                if not self.diag[alone].any():
                    return np.cumsum(alone) * alone
                break
            reached = grown
        from scipy.sparse.csgraph import connected_components

        graph = self.offdiag.copy()
        graph.eliminate_zeros()
        return connected_components(graph, directed=False)[1]

    def solve(self, rhs: np.ndarray, x: np.ndarray, tol: float) -> np.ndarray:
        """A least-squares x for x_dst - x_src = rhs over the kept edges, from x.

        Conjugate gradients with the Jacobi preconditioner, written out for its stopping rule
        (see OFFSET_TOL_NS): a random probe graph is an expander, so each digit takes about
        two iterations."""
        e, w, n = self.e, self.w, len(x)
        b = np.bincount(e.dst, w * rhs, n) - np.bincount(e.src, w * rhs, n)
        x = x.copy()
        r = b - self.offdiag @ x - self.diag * x
        z = self.jacobi * r
        p, rz, scratch = z.copy(), _dot(r, z), np.empty(n)
        # In place where it can be: a fresh array of 100k hosts costs more in page faults than
        # the arithmetic on it.
        for _ in range(MAX_ITERATIONS):
            if np.abs(z, out=scratch).max(initial=0.0) <= tol:
                break
            q = self.offdiag @ p
            q += np.multiply(self.diag, p, out=scratch)
            alpha = rz / _dot(p, q)
            x += np.multiply(alpha, p, out=scratch)
            r -= np.multiply(alpha, q, out=scratch)
            np.multiply(self.jacobi, r, out=z)
            rz, rz_old = _dot(r, z), rz
            p *= rz / rz_old
            p += z
        return x


def solve(n: int, edges: Edges, reference: int, t0_ns: int, *, outlier_ns: float = 1_000.0,
          max_rounds: int = 10, guess: np.ndarray | None = None) -> Solution:
    """Offsets and drifts for n hosts. Edges that disagree with the solution are peeled off,
    the worst around each host first (a liar bends the solution near it, so an honest edge
    beside it can look bad until the liar is gone), until every kept edge agrees."""
    e = edges
    system = _System(n, e)
    kept = np.ones(len(e), dtype=bool)
    span = (e.center_ns - t0_ns).astype(float)
    log_drift = np.log1p(e.drift)
    u = np.zeros(n)  # log(1 + y)
    x = np.zeros(n) if guess is None else np.array(guess, dtype=float)
    # The host each one is held relative to: until the peeling is over, the reference for all
    # (a part cut off from it just floats).
    anchor = np.full(n, reference)
    peel_tol = max(PEEL_TOL * outlier_ns, OFFSET_TOL_NS)
    for round_ in range(max_rounds + 1):
        u, b_hat, drift_error = _drifts(system, log_drift, u, anchor, PEEL_LOG_DRIFT_TOL)
        a0 = e.offset_ns - b_hat * span
        for _ in range(2 if round_ == 0 else 1):  # the first round starts from nothing
            x = _offsets(system, a0, b_hat, x, anchor, peel_tol)
        if round_ == max_rounds:
            break
        drop = _suspects(system, kept, np.abs(_residuals(e, a0, b_hat, drift_error, x)), outlier_ns)
        if not len(drop):
            break
        kept[drop] = False
        system.drop(drop)
    labels = system.parts(reference)
    # One anchor per part: the reference in its own part, else the part's lowest host.
    _, first = np.unique(labels, return_index=True)
    first[labels[reference]] = reference
    anchor = first[labels]
    u -= u[anchor]
    x -= x[anchor]
    # The final solve, to full precision, with as many passes as it takes for the last one not
    # to move the x_i on the right any more (a far part just shifted to its anchor needs several).
    u, b_hat, drift_error = _drifts(system, log_drift, u, anchor, LOG_DRIFT_TOL)
    a0 = e.offset_ns - b_hat * span
    for _ in range(MAX_PASSES):
        x, last = _offsets(system, a0, b_hat, x, anchor, OFFSET_TOL_NS), x
        if np.abs(x - last).max(initial=0.0) * np.abs(b_hat).max(initial=0.0) <= OFFSET_TOL_NS:
            break
    residual = _residuals(e, a0, b_hat, drift_error, x)
    limit, drift_limit = _bounds(system, e, kept, (residual, drift_error / 1e9), span, reference, labels)
    sigma = _standard_errors(system, kept, _offset_residuals(e, a0, b_hat, x), labels, reference)
    drift_sigma = _standard_errors(system, kept, drift_error / 1e9, labels, reference)
    bound = np.minimum(limit, BOUND_Z * np.hypot(sigma, sigma[reference]))
    drift_bound = np.minimum(drift_limit, BOUND_Z * np.hypot(drift_sigma, drift_sigma[reference]))
    return Solution(t0_ns, x, np.expm1(u), labels, int(labels[reference]), kept, residual, bound, drift_bound,
                    limit, sigma, drift_limit, drift_sigma)


def _drifts(system: _System, log_drift: np.ndarray, u: np.ndarray, anchor: np.ndarray,
            tol: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """u = log(1 + y), zero at the anchors; per edge, b_hat = (y_dst - y_src) / (1 + y_src) and
    the fit's drift minus that, as the offset error it makes over one second."""
    u = system.solve(log_drift, u, tol)
    u -= u[anchor]
    gap = u[system.e.dst] - u[system.e.src]
    return u, np.expm1(gap), (log_drift - gap) * 1e9


def _offsets(system: _System, a0: np.ndarray, b_hat: np.ndarray, x: np.ndarray, anchor: np.ndarray,
             tol: float) -> np.ndarray:
    """One pass of the fixed point: x from x_dst - x_src = a0 + b_hat x_src, the x_src on the
    right taken from x. (a0 is the pair's offset at src's clock t0; at global time t0 src's
    clock reads t0 + x_src, where the pair says a0 + b x_src.)"""
    x = system.solve(a0 + b_hat * x[system.e.src], x, tol)
    return x - x[anchor]


def _offset_residuals(e: Edges, a0: np.ndarray, b_hat: np.ndarray, x: np.ndarray) -> np.ndarray:
    x_src = x[e.src]
    return a0 + b_hat * x_src - (x[e.dst] - x_src)


def _residuals(e: Edges, a0: np.ndarray, b_hat: np.ndarray, drift_error: np.ndarray,
               x: np.ndarray) -> np.ndarray:
    """What each edge says minus what the solution says, in ns: the offset's, or the drift's
    where that is larger."""
    offset_error = _offset_residuals(e, a0, b_hat, x)
    return np.where(np.abs(drift_error) > np.abs(offset_error), drift_error, offset_error)


def _suspects(system: _System, kept: np.ndarray, size: np.ndarray, outlier_ns: float) -> np.ndarray:
    """Kept edges to drop this round: those beyond what the kept edges agree on (a robust 6
    sigma, at least outlier_ns), unless they may be a liar's victims.

    A liar of error E shifts each of its hosts by about E w / (the host's weighted degree), and
    the honest edges there show that shift as their residual; so the weighted mean residual at
    a host is about twice that shift (the liar's E, plus the shift on every other edge). An edge
    not above the sum of those means at its two ends waits for the next round; the worst edge
    never does."""
    e = system.e
    step = max(1, len(size) // 50_000)  # a sample gives as good a scale for much less sorting
    sample = size[::step][kept[::step]]
    scale = 1.4826 * np.median(sample) if len(sample) else 0.0
    suspect = np.flatnonzero(kept & (size > max(outlier_ns, 6 * scale)))
    if not len(suspect):
        return suspect
    n, wr = len(system.diag), system.w * size
    with np.errstate(invalid="ignore"):
        mean = (np.bincount(e.src, wr, n) + np.bincount(e.dst, wr, n)) / system.diag
    s, d, sz = e.src[suspect], e.dst[suspect], size[suspect]
    return suspect[sz >= np.minimum(mean[s] + mean[d], sz.max())]


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """a . b on one thread: OpenBLAS spreads a dot of 100k over every core, and its threads
    then spin, which cost more than they save (twice the CPU time, and slower on a busy machine)."""
    return float(np.einsum("i,i", a, b))


def _bounds(system: _System, e: Edges, kept: np.ndarray, residuals: tuple[np.ndarray, np.ndarray],
            span: np.ndarray, reference: int, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per host, how far its offset at t0 and its drift can be from the truth.

    Along any path of kept edges from the reference, the solution's offsets differ by what the
    edges said less their residuals, and the truth by what they said less their errors; so a
    host's error is at most the sum, along the path, of each edge's error bound (its band's
    half-width, plus its drift's error over the time from its centre to t0) and |residual|. The
    shortest such path is the bound; the drift's, likewise, from each edge's feasible slopes and
    drift residual. Hosts outside the reference's part have none (nan)."""
    residual, drift_residual = residuals
    drift_bound = np.full(len(e), DRIFT_BOUND) if e.drift_bound is None else np.abs(e.drift_bound)
    margin = np.zeros(len(e)) if e.margin_ns is None else np.abs(e.margin_ns)
    offset_cost = margin + np.abs(residual) + drift_bound * np.abs(span)
    drift_cost = drift_bound + np.abs(drift_residual)
    return (_shortest(system, e, kept, offset_cost, reference, labels),
            _shortest(system, e, kept, drift_cost, reference, labels))


def _standard_errors(system: _System, kept: np.ndarray, residual: np.ndarray, labels: np.ndarray,
                     reference: int) -> np.ndarray:
    """Per host, the standard error of its solved offset, as least squares propagates it: the
    variance a unit weight carries, estimated from the kept pairs' residuals (sum w r^2 over the
    loops' degrees of freedom, pairs less hosts plus one), over the host's weighted degree. The
    two rows of a pair (each end reports it) count as one: both see the same paths' asymmetry.
    A host whose own pairs disagree more than the fleet's takes its own estimate: the pooled one
    would cover a noisy host with its quiet neighbours' figure. What no loop shows (every pair of a host
    off alike) is in no residual: health.asymmetric_hosts names that, and `limit_ns` holds.
    Hosts outside the reference's part, and every host of a graph with no loop, get inf; a
    graph with few loops, a standard error widened to keep the bound's tail (`_few_loops`)."""
    e, n = system.e, len(labels)
    k = np.flatnonzero(kept & (system.w > 0) & (labels[e.src] == labels[reference]))
    sigma = np.full(n, np.inf)
    if not len(k):
        return sigma
    lo, hi = np.minimum(e.src[k], e.dst[k]), np.maximum(e.src[k], e.dst[k])
    pairs, row = np.unique(lo.astype(np.int64) * n + hi, return_inverse=True)
    rows = np.bincount(row)
    w = np.bincount(row, system.w[k]) / rows
    # a residual is the pair's view minus the solve's, from its reporter's side: turn it to lo's
    r = np.bincount(row, np.where(e.src[k] == lo, residual[k], -residual[k])) / rows
    a, b = pairs // n, pairs % n
    hosts = np.union1d(a, b)
    dof = len(pairs) - (len(hosts) - 1)
    if dof <= 0:
        return sigma
    wr2 = w * r * r
    pooled = wr2.sum() / dof
    degree = np.bincount(a, minlength=n) + np.bincount(b, minlength=n)
    weight = np.bincount(a, w, n) + np.bincount(b, w, n)
    spread = np.bincount(a, wr2, n) + np.bincount(b, wr2, n)
    local = spread[hosts] / degree[hosts] * len(pairs) / dof
    sigma[hosts] = np.sqrt(np.maximum(local, pooled) / weight[hosts]) * _few_loops(dof)
    return sigma


def _few_loops(dof: int) -> float:
    """How much wider BOUND_Z must be, for the same tail, with the variance judged from dof
    loops (Student's t against the normal): 1.4 at 21 loops (8 hosts probing all others),
    31 at 3, 2e5 at one, which then leaves the limit to speak."""
    from scipy.special import ndtr, stdtrit

    return float(stdtrit(dof, ndtr(BOUND_Z)) / BOUND_Z)


def _shortest(system: _System, e: Edges, kept: np.ndarray, cost: np.ndarray, reference: int,
              labels: np.ndarray) -> np.ndarray:
    """Per host, the cheapest path of kept edges from the reference (nan: none)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    n = len(system.diag)
    # dijkstra takes an explicit zero as no edge: a floor keeps exact edges
    graph = csr_matrix((np.maximum(cost, 1e-12)[kept], (e.src[kept], e.dst[kept])), shape=(n, n))
    # undirected: an edge may be walked either way (each host reports a peer once, so no pair of
    # hosts has two entries in one direction for the matrix to add up)
    bound = dijkstra(graph, directed=False, indices=reference)
    return np.where((labels == labels[reference]) & np.isfinite(bound), bound, np.nan)
