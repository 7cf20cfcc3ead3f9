"""All-to-all over `Links` (see ring.py): every rank sends a distinct block to every other rank.

send is cut into n = len(ranks) equal blocks: block j goes to ranks[j]; recv block j is
filled from ranks[j]; a rank's own block is copied locally. Blocks must be equal (the
element count divisible by n) as nccl-tests requires; ring.bounds could cut near-equal blocks,
but then a benchmark's bytes per rank would no longer be the size it reports.

Two schedules (ALGORITHMS):

- pairwise (default): n-1 steps; at step k the rank at position p sends to position
  (p+k) % n and receives from (p-k) % n. Each step is a permutation, so every host link
  carries one message each way per step and no receiver is flooded.
- oneshot: every send and receive at once, and the transport and the network sort out the
  n-1 flows each way (fewer hand-offs, more contention). Given the ranks' leaf groups, the
  blocks to leaf-mates start only once every leaf-crossing block is half sent (LOCAL_AFTER).
  A leaf-mate's block crosses the leaf switch alone, where there is room; the others share
  the uplinks, which the all-to-all waits on. Sent at once, it takes a share of the NIC just
  when the uplinks could use all of it: at an iteration's start, while other ranks under the
  leaf are still finishing the last one. It still lands long before the crossing blocks.

Each rank sends (n-1)/n of its buffer and receives as much: nccl-tests' busbw factor
(n-1)/n (results.BUS_FACTORS["alltoall"]).

alltoall_inputs / alltoall_expected are the worker's check: every element's value names
its sender, its receiver and its index in the block, so a misplaced block reads as wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from clockfabric.collective.ring import Links

EXACT = 1 << 24  # float32 holds every integer below this exactly
# oneshot: the share of each leaf-crossing block sent before the blocks to leaf-mates start.
# Two all-to-alls read 0.896 of the ideal on 4 spines against 0.888 with every block at once,
# and 0.883 against 0.874 on dual-plane; unchanged on 2 spines, where one NIC fills a leaf's
# uplinks (hand A/Bs, 10-24 seeds). A third or 0.7 sent first read worse than either.
LOCAL_AFTER = 0.5


def _bytes(a: np.ndarray) -> memoryview:
    return a.data.cast("B")


def block_count(count: int, n: int) -> int:
    """Elements per block; a clear error where count does not divide into n equal blocks."""
    if n < 1 or count % n:
        raise ValueError(f"all-to-all over {n} ranks needs an element count divisible by {n}; got {count}")
    return count // n


def _prepare(links: Links, send: np.ndarray, recv: np.ndarray, ranks: Sequence[int]) -> tuple[int, int, int]:
    """(n, this rank's position, block length) after checking the buffers; copies the own block."""
    ranks = list(ranks)
    n = len(ranks)
    if links.rank not in ranks:
        raise ValueError(f"rank {links.rank} is not among the all-to-all's ranks {ranks}")
    if send.shape != recv.shape or send.dtype != recv.dtype:
        raise ValueError(f"send and recv differ: {send.shape} {send.dtype} against {recv.shape} {recv.dtype}")
    if np.shares_memory(send, recv):  # blocks are written while others are still to be sent
        raise ValueError("all-to-all cannot run in place: send and recv must be separate buffers")
    b, p = block_count(len(send), n), ranks.index(links.rank)
    recv[p * b:(p + 1) * b] = send[p * b:(p + 1) * b]
    return n, p, b


def pairwise_alltoall(links: Links, send: np.ndarray, recv: np.ndarray, ranks: Sequence[int],
                      groups: Sequence[Sequence[int]] = ()) -> None:
    """n-1 steps, one peer each way per step (see the module docstring). groups: unused, each
    step's one send has the NIC to itself."""
    n, p, b = _prepare(links, send, recv, ranks)
    if b == 0:  # nothing to move: empty messages need no step
        return
    for k in range(1, n):
        to, frm = (p + k) % n, (p - k) % n
        links.exchange([(ranks[to], _bytes(send[to * b:(to + 1) * b]))],
                       [(ranks[frm], _bytes(recv[frm * b:(frm + 1) * b]))])


def oneshot_alltoall(links: Links, send: np.ndarray, recv: np.ndarray, ranks: Sequence[int],
                     groups: Sequence[Sequence[int]] = ()) -> None:
    """Every block to every peer at once; to leaf-mates (ranks sharing a group with this one)
    once each leaf-crossing block is LOCAL_AFTER sent (see the module docstring)."""
    n, p, b = _prepare(links, send, recv, ranks)
    if b == 0 or n == 1:
        return
    mates = next((set(g) for g in groups if ranks[p] in g), set())
    local = [j for j in range(n) if j != p and ranks[j] in mates]
    crossing = [j for j in range(n) if j != p and ranks[j] not in mates]
    cut = int(b * LOCAL_AFTER)

    def blocks(buf: np.ndarray, peers: list[int], a: int = 0, z: int = b) -> list[tuple[int, memoryview]]:
        """Elements a:z of each peer's block."""
        return [(ranks[j], _bytes(buf[j * b + a:j * b + z])) for j in peers]

    if len(groups) < 2 or not 0 < cut < b:  # no leaf to cross, or blocks too small to cut
        links.exchange(blocks(send, local + crossing), blocks(recv, local + crossing))
        return
    # every leaf-crossing block goes as two messages, so both ends cut it alike whatever else they hold
    arrived = links.start(recvs=blocks(recv, crossing, 0, cut) + blocks(recv, crossing, cut) + blocks(recv, local))
    head = links.start(sends=blocks(send, crossing, 0, cut))
    rest = [links.start(sends=blocks(send, crossing, cut))]
    if local:
        head.wait()
        rest.append(links.start(sends=blocks(send, local)))
    for pending in (head, *rest, arrived):
        pending.wait()


Algorithm = Callable[[Links, np.ndarray, np.ndarray, Sequence[int], Sequence[Sequence[int]]], None]
ALGORITHMS: dict[str, Algorithm] = {
    "pairwise": pairwise_alltoall,
    "oneshot": oneshot_alltoall,
}


def alltoall(links: Links, send: np.ndarray, recv: np.ndarray, ranks: Sequence[int],
             algorithm: str = "pairwise", groups: Sequence[Sequence[int]] = ()) -> None:
    """Block j of send to ranks[j]; block j of recv from ranks[j]. send and recv: contiguous, distinct.
    groups: the ranks under each leaf switch, alike on every rank (none: all leaf-crossing)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown all-to-all algorithm {algorithm!r}; use one of {sorted(ALGORITHMS)}")
    ALGORITHMS[algorithm](links, send, recv, ranks, groups)


def peers(algorithm: str, rank: int, ranks: Sequence[int]) -> set[int]:
    """The ranks this rank exchanges data with: every other one (both algorithms)."""
    return set(ranks) - {rank} if rank in ranks else set()


# ---- the worker's check --------------------------------------------------------------------------
def period(world: int) -> int:
    """Block indices repeat with this period in the values (2**24 // world**2: 262144 at 8 ranks)."""
    if not 1 <= world <= 4096:  # 4096**2 = 2**24: beyond that two (sender, receiver) pairs would share values
        raise ValueError(f"all-to-all check values need 1..4096 ranks; got {world}")
    return EXACT // world**2


def _values(count: int, world: int, pair: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    b, per = block_count(count, world), period(world)
    i = np.arange(count, dtype=np.int64)
    # pair(block) * per + index mod per < world**2 * per <= 2**24: an exact float32 integer
    return (pair(i // b) * per + i % b % per).astype(np.float32) if b else np.empty(0, np.float32)


def alltoall_inputs(count: int, rank: int, world: int) -> np.ndarray:
    """Rank `rank`'s send buffer: element t of block j is (rank * world + j) * P + t mod P, P = period(world)."""
    return _values(count, world, lambda j: rank * world + j)


def alltoall_expected(count: int, rank: int, world: int) -> np.ndarray:
    """What rank `rank` must receive (ranks 0..world-1 in order): block j is sender j's block `rank`."""
    return _values(count, world, lambda j: j * world + rank)

