"""Collective algorithms on numpy float32 buffers, over links to neighbours.

The algorithms see the network only as `Links`: the rank's own number and `exchange`,
which sends some buffers to some peers and fills others from other peers, all at once,
and returns when every transfer is complete. Both sides of a transfer know its size and
post it in the same order. `Transport` (TCP subflows) is the real implementation;
anything with the same two members will do (tests, a simulator).

Ring all-reduce (as NCCL's): the buffer is cut into n segments; n-1 reduce-scatter steps
leave each rank with one segment summed over the ring, n-1 all-gather steps hand the
sums round. Every step sends one segment right and receives one from the left, so each
link carries 2(n-1)/n of the buffer: nccl-tests' busbw factor.

Hierarchical all-reduce: ranks grouped by leaf switch (equal groups). Reduce-scatter in
each group, all-reduce each segment across groups among the ranks with the same local
index (so every leaf uplink carries only 1/m of the buffer), all-gather in each group.
A single group is the flat ring; groups of one are the flat ring too.

New collectives (all-to-all: every rank one exchange with all peers' sends and receives)
plug in as another entry of ALGORITHMS with its `peers` rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

Transfer = tuple[int, memoryview]  # (peer rank, bytes to send or to fill)


class Links(Protocol):
    rank: int

    def exchange(self, sends: Sequence[Transfer] = (), recvs: Sequence[Transfer] = ()) -> None:
        """Run these transfers concurrently; return when all are complete."""


def bounds(count: int, parts: int) -> list[int]:
    """parts+1 offsets cutting count items into near-equal parts (the first ones may be empty)."""
    return [count * k // parts for k in range(parts + 1)]


def _bytes(a: np.ndarray) -> memoryview:
    return memoryview(a).cast("B")


# ---- ring building blocks ---------------------------------------------------------------------
def reduce_scatter(links: Links, buf: np.ndarray, ring: Sequence[int]) -> int:
    """In place: afterwards this rank's segment (returned: an index into bounds(len(buf), n))
    holds the sum over the ring. Other segments hold partial sums."""
    n, p = len(ring), ring.index(links.rank)
    if n == 1:
        return 0
    cut = bounds(len(buf), n)
    right, left = ring[(p + 1) % n], ring[(p - 1) % n]
    tmp = np.empty(max(b - a for a, b in zip(cut, cut[1:])), dtype=buf.dtype)
    for s in range(n - 1):
        out, into = (p - s) % n, (p - s - 1) % n
        got = tmp[:cut[into + 1] - cut[into]]
        links.exchange([(right, _bytes(buf[cut[out]:cut[out + 1]]))], [(left, _bytes(got))])
        seg = buf[cut[into]:cut[into + 1]]
        np.add(seg, got, out=seg)
    return (p + 1) % n


def all_gather(links: Links, buf: np.ndarray, ring: Sequence[int]) -> None:
    """In place: from each rank holding segment (its position + 1) % n, every rank gets all."""
    n, p = len(ring), ring.index(links.rank)
    if n == 1:
        return
    cut = bounds(len(buf), n)
    right, left = ring[(p + 1) % n], ring[(p - 1) % n]
    for s in range(n - 1):
        out, into = (p + 1 - s) % n, (p - s) % n
        links.exchange([(right, _bytes(buf[cut[out]:cut[out + 1]]))],
                       [(left, _bytes(buf[cut[into]:cut[into + 1]]))])


# ---- all-reduce --------------------------------------------------------------------------------
def ring_allreduce(links: Links, buf: np.ndarray, ring: Sequence[int]) -> None:
    """Sum buf over the ranks of ring, in place (buf: contiguous; float32 in practice)."""
    reduce_scatter(links, buf, ring)
    all_gather(links, buf, ring)


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


def peers(algorithm: str, rank: int, groups: Sequence[Sequence[int]]) -> set[int]:
    """The ranks this rank exchanges data with (the pairs a transport must connect)."""
    everyone = sorted(r for g in groups for r in g)
    if algorithm == "ring" or len(groups) == 1:
        return _ring_peers(everyone, rank)
    group = next(g for g in groups if rank in g)
    local = list(group).index(rank)
    return _ring_peers(group, rank) | _ring_peers([g[local] for g in groups], rank)


def run(algorithm: str, links: Links, buf: np.ndarray, groups: Sequence[Sequence[int]]) -> None:
    """All-reduce buf with the named algorithm. groups: ranks by leaf (ring ignores them)."""
    ALGORITHMS[algorithm](links, buf, groups)


ALGORITHMS: dict[str, Callable[[Links, np.ndarray, Sequence[Sequence[int]]], None]] = {
    "ring": lambda links, buf, groups: ring_allreduce(links, buf, sorted(r for g in groups for r in g)),
    "hier": hier_allreduce,
}
