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
from scipy.sparse.linalg import cg



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


def _anchors(n: int, e: Edges, reference: int) -> tuple[np.ndarray, np.ndarray]:
    """Component labels, and one anchor per component: the reference where it is, else the lowest host."""
    graph = sp.csr_matrix((np.ones(len(e)), (e.src, e.dst)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    anchor = np.zeros(n, dtype=bool)
    _, first = np.unique(labels, return_index=True)
    anchor[first] = True
    anchor[first[labels[first] == labels[reference]]] = False
    anchor[reference] = True
    return labels, anchor


class _System:
    """The weighted graph Laplacian of the kept edges, x = 0 pinned at the anchors."""

    def __init__(self, n: int, e: Edges, kept: np.ndarray, anchor: np.ndarray):
        self.n, self.e, self.anchor = n, e, anchor
        self.w = w = np.where(kept, e.weight, 0.0)
        inner = kept & ~(anchor[e.src] | anchor[e.dst])
        diag = np.bincount(e.src, w, n) + np.bincount(e.dst, w, n)
        diag[anchor | (diag == 0)] = 1.0
        rows = np.concatenate([e.src[inner], e.dst[inner], np.arange(n)])
        cols = np.concatenate([e.dst[inner], e.src[inner], np.arange(n)])
        vals = np.concatenate([-w[inner], -w[inner], diag])
        self.matrix = sp.csr_matrix((vals, (rows, cols)), shape=(n, n))
        self.precond = sp.diags(1.0 / diag)

    def solve(self, rhs: np.ndarray, guess: np.ndarray | None) -> np.ndarray:
        """argmin sum w (x_dst - x_src - rhs)^2 over kept edges, with x = 0 at the anchors.

        It solves for the correction to a guess, so the solver's relative tolerance applies
        to that correction: 1e-6 of it is far below a nanosecond once the guess is close."""
        e, w = self.e, self.w
        if guess is not None:
            rhs = rhs - (guess[e.dst] - guess[e.src])
        b = np.bincount(e.dst, w * rhs, self.n) - np.bincount(e.src, w * rhs, self.n)
        b[self.anchor] = 0.0
        x, _ = cg(self.matrix, b, rtol=1e-6, atol=0.0, maxiter=1000, M=self.precond)
        if guess is not None:
            x += guess
        x[self.anchor] = 0.0
        return x


def solve(n: int, edges: Edges, reference: int, t0_ns: int, *, outlier_ns: float = 1_000.0,
          max_rounds: int = 10, guess: np.ndarray | None = None) -> Solution:
    """Offsets and drifts for n hosts. Edges that disagree with the solution are peeled off,
    worst first (a liar bends the solution near it, so an honest edge beside it can look bad
    until the liar is gone), until every kept edge agrees."""
    kept = np.ones(len(edges), dtype=bool)
    _, anchor = _anchors(n, edges, reference)
    system = _System(n, edges, kept, anchor)
    x = np.zeros(n) if guess is None else guess
    u = None
    passes = 2  # the first round starts from nothing; later ones from the last solution
    span = (edges.center_ns - t0_ns).astype(float)
    for round_ in range(max_rounds + 1):
        for _ in range(passes):
            u = system.solve(np.log1p(edges.drift), u)
        y = np.expm1(u)
        b_hat = (y[edges.dst] - y[edges.src]) / (1 + y[edges.src])
        for _ in range(passes):
            x = system.solve(edges.offset_ns - b_hat * (span - x[edges.src]), x)
        passes = 1
        residual = _residuals(edges, x, y, t0_ns)
        if round_ == max_rounds:
            break
        size = np.abs(residual)
        scale = 1.4826 * np.median(size[kept]) if kept.any() else 0.0
        agreed = max(outlier_ns, 6 * scale)
        worst = size[kept].max(initial=0.0)
        if worst <= agreed:
            break
        kept &= size <= max(agreed, worst / 8)
        system = _System(n, edges, kept, anchor)
    final_labels, final_anchor = _anchors(n, edges.subset(kept), reference)
    if not np.array_equal(final_anchor, anchor):  # the graph split: pin each part and solve again
        system = _System(n, edges, kept, final_anchor)
        for _ in range(2):
            u = system.solve(np.log1p(edges.drift), u)
        y = np.expm1(u)
        b_hat = (y[edges.dst] - y[edges.src]) / (1 + y[edges.src])
        for _ in range(2):
            x = system.solve(edges.offset_ns - b_hat * (span - x[edges.src]), x)
        residual = _residuals(edges, x, y, t0_ns)
    return Solution(t0_ns, x, y, final_labels, int(final_labels[reference]), kept, residual,
                    _host_rms(n, edges, kept, residual))


def _residuals(e: Edges, x: np.ndarray, y: np.ndarray, t0_ns: int) -> np.ndarray:
    """What each edge says minus what the solution says, offsets in ns; a drift that
    disagrees counts as the offset error it makes over one second."""
    b_hat = (y[e.dst] - y[e.src]) / (1 + y[e.src])
    predicted = x[e.dst] - x[e.src] + b_hat * ((e.center_ns - t0_ns).astype(float) - x[e.src])
    drift_error = (np.log1p(e.drift) - (np.log1p(y[e.dst]) - np.log1p(y[e.src]))) * 1e9
    return np.where(np.abs(drift_error) > np.abs(e.offset_ns - predicted), drift_error, e.offset_ns - predicted)


def _host_rms(n: int, e: Edges, kept: np.ndarray, residual: np.ndarray) -> np.ndarray:
    r2 = np.where(kept, residual, 0.0) ** 2
    sq = np.bincount(e.src, r2, n) + np.bincount(e.dst, r2, n)
    count = np.bincount(e.src, kept, n) + np.bincount(e.dst, kept, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, np.sqrt(sq / count), np.nan)
