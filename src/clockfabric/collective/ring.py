"""Collective algorithms on numpy float32 buffers, over links to neighbours.

The algorithms see the network only as `Links`: the rank's own number; `start`, which
posts sends of some buffers to some peers and receives filling others from other peers,
and returns a `Pending` whose wait() returns when every one is complete; and `exchange`,
start and wait in one. Both sides of a transfer know its size and post it in the same
order. `Transport` (TCP subflows) is the real implementation; anything with the same
members will do (tests, a simulator).

Ring all-reduce (as NCCL's): the buffer is cut into n segments; n-1 reduce-scatter steps
leave each rank with one segment summed over the ring, n-1 all-gather steps hand the
sums round. Every step sends one segment right and receives one from the left, so each
link carries 2(n-1)/n of the buffer: nccl-tests' busbw factor. Steps are pipelined as
NCCL's: a segment moves in slices, and a slice goes on to the next step as soon as it has
arrived (and been added), so no link idles while a step's last bytes cross the ring. Every
receive is posted up front; the ring's own order makes that safe (a segment's new data
can only arrive once its old data has gone on to the right).

Hierarchical all-reduce: ranks grouped by leaf switch (equal groups). Reduce-scatter in
each group, all-reduce each segment across groups among the ranks with the same local
index (so every leaf uplink carries only 1/m of the buffer), all-gather in each group.
A single group is the flat ring; groups of one are the flat ring too.

New collectives (all-to-all: every rank one exchange with all peers' sends and receives)
plug in as another entry of ALGORITHMS with its `peers` rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Protocol

import numpy as np

Transfer = tuple[int, memoryview]  # (peer rank, bytes to send or to fill)
SLICE = 256 << 10  # bytes: a ring step's segment moves in slices of about this size


class Pending(Protocol):
    def wait(self) -> None:
        """Return when every transfer posted with this is complete."""


class Links(Protocol):
    rank: int

    def start(self, sends: Sequence[Transfer] = (), recvs: Sequence[Transfer] = ()) -> Pending:
        """Post these transfers (in order after those posted before) and return at once."""

    def exchange(self, sends: Sequence[Transfer] = (), recvs: Sequence[Transfer] = ()) -> None:
        """Run these transfers concurrently; return when all are complete."""


def bounds(count: int, parts: int) -> list[int]:
    """parts+1 offsets cutting count items into near-equal parts (the first ones may be empty)."""
    return [count * k // parts for k in range(parts + 1)]


def _bytes(a: np.ndarray) -> memoryview:
    return a.data.cast("B")


# ---- ring building blocks ---------------------------------------------------------------------
def ring_steps(links: Links, buf: np.ndarray, ring: Sequence[int], steps: range) -> None:
    """Run these steps of the ring all-reduce, in place. Steps 0..n-2 reduce-scatter (add what
    arrives), n-1..2n-3 all-gather (keep it). At step t the rank at position p sends segment
    (p - t) % n right and receives segment (p - t - 1) % n from the left: what it sends at
    t + 1. Each segment moves in the same slices at every step, so slice j goes on as soon as
    it is in. n > 1."""
    n, p = len(ring), ring.index(links.rank)
    cut = bounds(len(buf), n)
    right, left = ring[(p + 1) % n], ring[(p - 1) % n]
    widest = max(b - a for a, b in pairwise(cut))
    pieces = max(1, -(-widest * buf.itemsize // SLICE))
    slices = [[(cut[s] + a, cut[s] + b) for a, b in pairwise(bounds(cut[s + 1] - cut[s], pieces))]
              for s in range(n)]
    into = [(p - t - 1) % n for t in range(2 * n - 2)]  # the segment each step receives
    reducing = {t: np.empty(widest, dtype=buf.dtype) for t in steps if t < n - 1}  # what arrives to be added

    def landing(t: int, a: int, b: int) -> np.ndarray:
        """Where slice a:b of step t's segment arrives: apart, to be added, or in place."""
        return reducing[t][a - cut[into[t]]:b - cut[into[t]]] if t in reducing else buf[a:b]

    recvs = {(t, j): links.start(recvs=[(left, _bytes(landing(t, a, b)))])
             for t in steps for j, (a, b) in enumerate(slices[into[t]])}

    def arrived(t: int, j: int, a: int, b: int) -> None:
        recvs[t, j].wait()
        if t in reducing:
            np.add(buf[a:b], landing(t, a, b), out=buf[a:b])

    sends = []
    for t in steps:
        for j, (a, b) in enumerate(slices[(p - t) % n]):
            if t > steps[0]:
                arrived(t - 1, j, a, b)
            sends.append(links.start(sends=[(right, _bytes(buf[a:b]))]))
    for j, (a, b) in enumerate(slices[into[steps[-1]]]):
        arrived(steps[-1], j, a, b)
    for sent in sends:
        sent.wait()


def reduce_scatter(links: Links, buf: np.ndarray, ring: Sequence[int]) -> int:
    """In place: afterwards this rank's segment (returned: an index into bounds(len(buf), n))
    holds the sum over the ring. Other segments hold partial sums."""
    n, p = len(ring), ring.index(links.rank)
    if n > 1:
        ring_steps(links, buf, ring, range(n - 1))
    return (p + 1) % n


def all_gather(links: Links, buf: np.ndarray, ring: Sequence[int]) -> None:
    """In place: from each rank holding segment (its position + 1) % n, every rank gets all."""
    n = len(ring)
    if n > 1:
        ring_steps(links, buf, ring, range(n - 1, 2 * n - 2))


# ---- all-reduce --------------------------------------------------------------------------------
def ring_allreduce(links: Links, buf: np.ndarray, ring: Sequence[int]) -> None:
    """Sum buf over the ranks of ring, in place (buf: contiguous; float32 in practice): both
    halves in one pipeline, so the all-gather starts on the first slices summed."""
    n = len(ring)
    if n > 1:
        ring_steps(links, buf, ring, range(2 * n - 2))


def hier_allreduce(links: Links, buf: np.ndarray, groups: Sequence[Sequence[int]]) -> None:
    """Sum buf over all ranks of groups, in place: rings inside groups, then across them."""
    group = next(g for g in groups if links.rank in g)
    if len(groups) == 1:
        return ring_allreduce(links, buf, group)
    _check_equal(groups)
    local = list(group).index(links.rank)
    own = reduce_scatter(links, buf, group)
    cut = bounds(len(buf), len(group))
    # the same local index owns the same segment in every group: all-reduce it across groups
    ring_allreduce(links, buf[cut[own]:cut[own + 1]], [g[local] for g in groups])
    all_gather(links, buf, group)


def _check_equal(groups: Sequence[Sequence[int]]) -> None:
    sizes = sorted({len(g) for g in groups})
    if len(sizes) > 1:
        raise ValueError(f"hierarchical all-reduce needs groups of one size; got sizes {sizes}")


# ---- what each algorithm needs -----------------------------------------------------------------
def _ring_peers(ring: Sequence[int], rank: int) -> set[int]:
    if rank not in ring or len(ring) == 1:
        return set()
    p = list(ring).index(rank)
    return {ring[(p + 1) % len(ring)], ring[(p - 1) % len(ring)]}


def _rings(algorithm: str, rank: int, groups: Sequence[Sequence[int]]) -> list[list[int]]:
    """The rings this rank takes part in, each in its order (a rank sends to its right)."""
    everyone = sorted(r for g in groups for r in g)
    if algorithm == "ring" or len(groups) == 1:
        return [everyone]
    group = next(g for g in groups if rank in g)
    local = list(group).index(rank)
    return [list(group), [g[local] for g in groups]]


def peers(algorithm: str, rank: int, groups: Sequence[Sequence[int]]) -> set[int]:
    """The ranks this rank exchanges data with (the pairs a transport must connect)."""
    return {r for ring in _rings(algorithm, rank, groups) for r in _ring_peers(ring, rank)}


def successors(algorithm: str, rank: int, groups: Sequence[Sequence[int]]) -> set[int]:
    """The ranks this rank sends data to: its right-hand neighbour in each of its rings."""
    return {ring[(ring.index(rank) + 1) % len(ring)] for ring in _rings(algorithm, rank, groups)
            if rank in ring and len(ring) > 1}


def run(algorithm: str, links: Links, buf: np.ndarray, groups: Sequence[Sequence[int]]) -> None:
    """All-reduce buf with the named algorithm. groups: ranks by leaf (ring ignores them)."""
    ALGORITHMS[algorithm](links, buf, groups)


ALGORITHMS: dict[str, Callable[[Links, np.ndarray, Sequence[Sequence[int]]], None]] = {
    "ring": lambda links, buf, groups: ring_allreduce(links, buf, sorted(r for g in groups for r in g)),
    "hier": hier_allreduce,
}
