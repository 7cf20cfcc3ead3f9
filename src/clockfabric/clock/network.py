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

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

# The solves stop when no host's Jacobi step (its residual over its diagonal) exceeds these,
# in the unknown's own unit: far below the noise of a pair fit (tens of ns, 1e-9 in drift),
# and absolute, so a solve that starts from a close guess ends after a few iterations.
OFFSET_TOL_NS = 1e-3
LOG_DRIFT_TOL = 1e-13
MAX_ITERATIONS = 1000
# A liar of error E bends the residuals of the honest edges beside it by about E / degree
# (at least ~8 hosts share each host's load here); so a suspect edge is only dropped when no
# suspect beside it is more than this many times worse: it may be its victim.
SHADOW = 8


@dataclass
class Edges:
    """Pair fits as parallel arrays (one row per fit; i probed j)."""

    src: np.ndarray  # int
    dst: np.ndarray  # int
    offset_ns: np.ndarray  # a: c_j - c_i at src's time center_ns
    drift: np.ndarray  # b
    center_ns: np.ndarray  # int64, src's clock
    weight: np.ndarray

    def __len__(self) -> int:
        return len(self.src)

    def subset(self, keep: np.ndarray) -> Edges:
        return Edges(*(getattr(self, f)[keep] for f in ("src", "dst", "offset_ns", "drift", "center_ns", "weight")))


@dataclass
class Solution:
    t0_ns: int
    offset_ns: np.ndarray  # x: host clock minus global time, at global time t0
    drift: np.ndarray  # y
    component: np.ndarray  # label per host; hosts with no edge have a part of their own
    reference_component: int
    kept: np.ndarray  # bool per input edge
    residual_ns: np.ndarray  # per input edge, after the final solve
    uncertainty_ns: np.ndarray  # per host: RMS residual of its kept edges

    @property
    def parts(self) -> int:
        return int(self.component.max()) + 1 if len(self.component) else 0

    def synced(self) -> np.ndarray:
        """Hosts tied to the reference through kept edges."""
        return self.component == self.reference_component


class _System:
    """The weighted graph Laplacian of the kept edges, with some hosts pinned at zero.

    Its sparse structure is built once for all edges; dropping an edge zeroes its two entries
    (rebuilding the matrix each round cost more than the solves)."""

    def __init__(self, n: int, e: Edges):
        m = len(e)
        self.e, self.w = e, e.weight.astype(float)  # w: zero once an edge is dropped
        # Order the 2m off-diagonal entries by row with scipy's counting sort (a matrix with
        # entry p at column rows[p], converted to CSC, lists the p of each column in turn):
        # O(m), where sorting the keys or converting COO to CSR (which sorts each row) is not.
        rows = np.concatenate([e.src, e.dst])
        by_row = sp.csr_matrix((np.ones(2 * m), rows, np.arange(2 * m + 1)), shape=(2 * m, n)).tocsc()
        order = by_row.indices
        self.slot = np.empty_like(order)  # edge k's two entries sit at slot[k] and slot[k + m]
        self.slot[order] = np.arange(2 * m)
        cols = np.concatenate([e.dst, e.src])[order]
        self.offdiag = sp.csr_matrix((-self.w[order % m], cols, by_row.indptr), shape=(n, n))
        self.pinned = np.zeros(n, dtype=bool)
        self._update_diagonal()

    def drop(self, k: np.ndarray) -> None:
        self.w[k] = 0.0
        self.offdiag.data[self.slot[k]] = 0.0
        self.offdiag.data[self.slot[k + len(self.e)]] = 0.0
        self._update_diagonal()

    def pin(self, hosts: np.ndarray) -> None:
        """Hold these hosts where the next solves find them (they must be zero there)."""
        self.pinned[hosts] = True
        self._update_diagonal()

    def _update_diagonal(self) -> None:
        e, n = self.e, len(self.pinned)
        self.diag = np.bincount(e.src, self.w, n) + np.bincount(e.dst, self.w, n)
        # A zero in the preconditioner keeps a host out of every search direction: that is how
        # pinned hosts stay put (this is CG on the system without their rows and columns), and
        # how hosts left with no edge stay at their guess.
        with np.errstate(divide="ignore"):
            self.jacobi = np.where(self.pinned | (self.diag == 0), 0.0, 1.0 / self.diag)

    def parts(self) -> np.ndarray:
        """Connected part of each host through kept edges (those of weight zero do not count)."""
        graph = self.offdiag.copy()
        graph.eliminate_zeros()
        return connected_components(graph, directed=False)[1]

    def solve(self, rhs: np.ndarray, x: np.ndarray, tol: float) -> np.ndarray:
        """argmin sum w (x_dst - x_src - rhs)^2 over kept edges, pinned hosts held, from x.

        Conjugate gradients with the Jacobi preconditioner (written out for its stopping rule,
        see OFFSET_TOL_NS): the graph is an expander, so this converges in tens of iterations."""
        e, w = self.e, self.w
        b = np.bincount(e.dst, w * rhs, len(x)) - np.bincount(e.src, w * rhs, len(x))
        x = x.copy()
        r = b - self.offdiag @ x - self.diag * x
        z = self.jacobi * r
        p, rz = z, r @ z
        for _ in range(MAX_ITERATIONS):
            if np.abs(z).max(initial=0.0) <= tol:
                break
            q = self.offdiag @ p + self.diag * p
            alpha = rz / (p @ q)
            x += alpha * p
            r -= alpha * q
            z = self.jacobi * r
            rz, rz_old = r @ z, rz
            p = z + (rz / rz_old) * p
        return x


def solve(n: int, edges: Edges, reference: int, t0_ns: int, *, outlier_ns: float = 1_000.0,
          max_rounds: int = 10, guess: np.ndarray | None = None) -> Solution:
    """Offsets and drifts for n hosts. Edges that disagree with the solution are peeled off,
    worst first (a liar bends the solution near it, so an honest edge beside it can look bad
    until the liar is gone), until every kept edge agrees."""
    e = edges
    system = _System(n, e)
    # Only the reference is pinned while edges are peeled: a part cut off from it floats (its
    # system is singular but consistent, which CG handles) and is pinned once the parts are known.
    system.pin(np.array([reference]))
    kept = np.ones(len(e), dtype=bool)
    span = (e.center_ns - t0_ns).astype(float)
    log_drift = np.log1p(e.drift)
    u = np.zeros(n)  # log(1 + y)
    x = np.zeros(n) if guess is None else np.array(guess, dtype=float)
    x[reference] = 0.0
    passes = 2  # the first round starts from nothing; later ones from the last solution
    for round_ in range(max_rounds + 1):
        u, x, residual = _solve_once(system, e, span, log_drift, u, x, passes)
        passes = 1
        if round_ == max_rounds:
            break
        drop = _suspects(n, e, kept, np.abs(residual), outlier_ns)
        if not len(drop):
            break
        kept[drop] = False
        system.drop(drop)
    labels = system.parts()
    # One anchor per part, held at zero: the reference in its own part, else the lowest host.
    # A floating part's solution is right up to a constant, so shifting it pins its anchor.
    _, anchor = np.unique(labels, return_index=True)
    anchor[labels[reference]] = reference
    u -= u[anchor[labels]]
    x -= x[anchor[labels]]
    if (system.diag[labels != labels[reference]] > 0).any():
        # Far parts with edges: u is exact after the shift, x is not (the shift changes the
        # x_i on the right of its equations), so solve x again with all anchors pinned.
        system.pin(anchor)
        u, x, residual = _solve_once(system, e, span, log_drift, u, x, 2)
    return Solution(t0_ns, x, np.expm1(u), labels, int(labels[reference]), kept, residual,
                    _host_rms(n, e, kept, residual))


def _solve_once(system: _System, e: Edges, span: np.ndarray, log_drift: np.ndarray, u: np.ndarray,
                x: np.ndarray, passes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Drifts, then offsets (passes of the fixed point in x_i), then the residual of every
    edge: offsets in ns; a drift that disagrees counts as the offset error it makes over one
    second."""
    u = system.solve(log_drift, u, LOG_DRIFT_TOL)
    b_hat = np.expm1(u[e.dst] - u[e.src])  # (y_j - y_i) / (1 + y_i)
    for _ in range(passes):
        x = system.solve(e.offset_ns - b_hat * (span - x[e.src]), x, OFFSET_TOL_NS)
    offset_error = e.offset_ns - (x[e.dst] - x[e.src] + b_hat * (span - x[e.src]))
    drift_error = (log_drift - (u[e.dst] - u[e.src])) * 1e9
    return u, x, np.where(np.abs(drift_error) > np.abs(offset_error), drift_error, offset_error)


def _suspects(n: int, e: Edges, kept: np.ndarray, size: np.ndarray, outlier_ns: float) -> np.ndarray:
    """Kept edges to drop this round: those beyond what the kept edges agree on (a robust
    6 sigma, at least outlier_ns), except ones in the shadow of a much worse one beside them."""
    scale = 1.4826 * np.median(size[kept]) if kept.any() else 0.0
    suspect = np.flatnonzero(kept & (size > max(outlier_ns, 6 * scale)))
    s, d, sz = e.src[suspect], e.dst[suspect], size[suspect]
    worst_at = np.zeros(n)
    np.maximum.at(worst_at, s, sz)
    np.maximum.at(worst_at, d, sz)
    return suspect[sz * SHADOW >= np.maximum(worst_at[s], worst_at[d])]


def _host_rms(n: int, e: Edges, kept: np.ndarray, residual: np.ndarray) -> np.ndarray:
    r2 = np.where(kept, residual, 0.0) ** 2
    sq = np.bincount(e.src, r2, n) + np.bincount(e.dst, r2, n)
    count = np.bincount(e.src, kept, n) + np.bincount(e.dst, kept, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, np.sqrt(sq / count), np.nan)
