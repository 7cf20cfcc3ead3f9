"""All-to-all: the schedules over in-memory links and over real TCP on loopback, the worker's check
values, the busbw factor and the expected busbw."""

import queue
import threading

import numpy as np
import pytest

from clockfabric.collective import alltoall as a2a
from clockfabric.collective.expected import expected_alltoall_busbw_gbps
from clockfabric.collective.results import busbw_gbps
from clockfabric.errors import ClockfabricError
from clockfabric.topology import leafspine, multirail
from tests.unit.test_collective import (
    on_loopback,  # ranks as threads over real TCP on 127.0.0.1
)

MBIT = 1e6 / 8 / 1e9  # 1 Mbit/s in GB/s
ALGORITHMS = sorted(a2a.ALGORITHMS)


def reference(sends: dict[int, np.ndarray], ranks: list[int]) -> dict[int, np.ndarray]:
    """numpy's all-to-all: receiver at position p gets block p of every sender, in ranks order."""
    n = len(ranks)
    blocks = {r: np.split(sends[r], n) for r in ranks}
    return {r: np.concatenate([blocks[s][p] for s in ranks]) for p, r in enumerate(ranks)}


# ---- in-memory links: the algorithm without any transport ------------------------------------------
class QueueLinks:
    """Links over unbounded queues between threads: sends never block, receives wait. Records every
    exchange as (peers sent to, peers received from) and checks sizes match."""

    def __init__(self, rank: int, mailboxes: dict):
        self.rank, self.mailboxes, self.calls = rank, mailboxes, []

    def exchange(self, sends=(), recvs=()):
        self.calls.append(([p for p, _ in sends], [p for p, _ in recvs]))
        self.start(sends, recvs, record=False).wait()

    def start(self, sends=(), recvs=(), record=True):
        """Sends at once; receives on wait(). Recorded as ((peer, bytes) sent, (peer, bytes) received)."""
        if record:
            self.calls.append(("start", [(p, len(v)) for p, v in sends], [(p, len(v)) for p, v in recvs]))
        for peer, view in sends:
            self.mailboxes[(self.rank, peer)].put(bytes(view))
        return type("Pending", (), {"wait": lambda _: self._fill(recvs)})()

    def _fill(self, recvs):
        for peer, view in recvs:
            data = self.mailboxes[(peer, self.rank)].get(timeout=10)
            assert len(data) == len(view), f"rank {self.rank} expected {len(view)} B from {peer}, got {len(data)}"
            view[:] = data


def in_memory(ranks: list[int], body) -> dict[int, object]:
    """Run body(links) for every rank as threads over QueueLinks; returns {rank: result | exception}."""
    mailboxes = {(a, b): queue.Queue() for a in ranks for b in ranks}
    links = {r: QueueLinks(r, mailboxes) for r in ranks}
    out = {}

    def main(r):
        try:
            out[r] = body(links[r])
        except Exception as e:  # noqa: BLE001 - handed to the test
            out[r] = e

    threads = [threading.Thread(target=main, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    return out


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("ranks", [[0, 1], [2, 0, 1], [3, 1, 4, 0, 2], list(range(8)), [7, 2, 5]])
def test_alltoall_matches_numpy_in_memory(algorithm, ranks):
    n = len(ranks)
    rng = np.random.default_rng(n)
    for count in (0, n, 5 * n):
        sends = {r: rng.standard_normal(count).astype(np.float32) for r in ranks}

        def body(links, count=count, sends=sends):
            recv = np.full(count, np.nan, np.float32)
            a2a.alltoall(links, sends[links.rank], recv, ranks, algorithm)
            return recv, links.calls

        out = in_memory(ranks, body)
        want = reference(sends, ranks)
        for r in ranks:
            assert not isinstance(out[r], Exception), f"rank {r}: {out[r]}"
            recv, calls = out[r]
            assert np.array_equal(recv, want[r]), f"rank {r}, {count} elements"
            if count == 0:
                assert calls == []  # empty blocks: nothing sent at all
            elif algorithm == "pairwise":  # n-1 steps: to (p+k) % n, from (p-k) % n
                p = ranks.index(r)
                assert calls == [([ranks[(p + k) % n]], [ranks[(p - k) % n]]) for k in range(1, n)]
            else:  # one exchange with everyone
                assert len(calls) == 1 and sorted(calls[0][0]) == sorted(calls[0][1]) == sorted(set(ranks) - {r})


@pytest.mark.parametrize("ranks", [[0, 1, 2, 3], [3, 0, 2, 1], list(range(8))])
def test_oneshot_sends_to_leaf_mates_once_the_crossing_blocks_are_half_sent(ranks):
    """Leaf groups: evens under one leaf, odds under the other. Each leaf-crossing block goes in
    two halves, and a leaf-mate's block is posted only after the first halves were sent."""
    groups = [[r for r in ranks if r % 2 == 0], [r for r in ranks if r % 2]]
    n, per = len(ranks), 6  # elements per block
    rng = np.random.default_rng(n)
    sends = {r: rng.standard_normal(n * per).astype(np.float32) for r in ranks}

    def body(links):
        recv = np.full(n * per, np.nan, np.float32)
        a2a.alltoall(links, sends[links.rank], recv, ranks, "oneshot", groups)
        return recv, links.calls

    out = in_memory(ranks, body)
    want = reference(sends, ranks)
    half = per // 2 * 4  # bytes
    for r in ranks:
        assert not isinstance(out[r], Exception), f"rank {r}: {out[r]}"
        recv, calls = out[r]
        assert np.array_equal(recv, want[r])
        crossing = [q for q in ranks if q % 2 != r % 2]
        mates = [q for q in ranks if q % 2 == r % 2 and q != r]
        assert [c[0] for c in calls] == ["start"] * 4
        assert calls[0][2] == [(q, half) for q in crossing] * 2 + [(q, 2 * half) for q in mates]  # all receives first
        assert calls[1][1] == calls[2][1] == [(q, half) for q in crossing]  # then both halves of the crossing blocks
        assert calls[3][1] == [(q, 2 * half) for q in mates]  # the leaf-mates' blocks last


def test_oneshot_cuts_crossing_blocks_alike_on_both_ends():
    """A rank alone under its leaf has no leaf-mate to hold back, yet its peers cut the blocks it
    sends and receives in halves: so must it. Under one leaf, or with no groups: one exchange."""
    ranks, data = [0, 1, 2], {r: np.arange(6, dtype=np.float32) + 10 * r for r in (0, 1, 2)}
    for groups, one_exchange in (([[0, 2], [1]], False), ([[0], [1], [2]], False), ([[0, 1, 2]], True), ((), True)):
        def body(links, g=groups):
            recv = np.full(6, np.nan, np.float32)
            a2a.alltoall(links, data[links.rank], recv, ranks, "oneshot", g)
            return recv, links.calls

        out = in_memory(ranks, body)
        for r in ranks:
            assert not isinstance(out[r], Exception), f"groups {groups}, rank {r}: {out[r]}"
            recv, calls = out[r]
            assert np.array_equal(recv, reference(data, ranks)[r])
            assert (len(calls) == 1 and calls[0][0] != "start") == one_exchange, (groups, r, calls)


def test_alltoall_bad_input():
    links = type("L", (), {"rank": 0})()
    x = np.zeros(6, np.float32)
    with pytest.raises(ValueError, match="divisible by 4"):
        a2a.alltoall(links, x, np.zeros(6, np.float32), [0, 1, 2, 3])
    with pytest.raises(ValueError, match="in place"):
        a2a.alltoall(links, x, x, [0, 1])
    with pytest.raises(ValueError, match="not among"):
        a2a.alltoall(links, x, np.zeros(6, np.float32), [1, 2])
    with pytest.raises(ValueError, match="differ"):
        a2a.alltoall(links, x, np.zeros(4, np.float32), [0, 1])
    with pytest.raises(ValueError, match="unknown"):
        a2a.alltoall(links, x, np.zeros(6, np.float32), [0, 1], "ring")


def test_peers_are_everyone_else():
    for algorithm in ALGORITHMS:
        assert a2a.peers(algorithm, 2, [0, 1, 2, 3]) == {0, 1, 3}
        assert a2a.peers(algorithm, 5, [0, 1]) == set()


# ---- over real TCP ---------------------------------------------------------------------------------
@pytest.mark.parametrize("subflows", [1, 3])
@pytest.mark.parametrize("world", [2, 3, 4, 5, 6, 7, 8])
def test_alltoall_matches_numpy_over_tcp(world, subflows):
    check_alltoall_matches_numpy(world, subflows)


@pytest.mark.parametrize("scheduler", ["least-outstanding", "owd"])
@pytest.mark.parametrize("world", [3, 5])
def test_alltoall_matches_numpy_under_every_scheduler(world, scheduler):
    check_alltoall_matches_numpy(world, 3, scheduler)


def check_alltoall_matches_numpy(world: int, subflows: int, scheduler: str = "ecmp") -> None:
    """Both algorithms, two rank orders, three leaf groupings, empty, tiny and uneven blocks: numpy's
    result on every rank."""
    rng = np.random.default_rng(world * 10 + subflows)
    orders = [list(range(world)), list(rng.permutation(world))]  # block j to ranks[j], whatever the order
    counts = [0, world, world * 1021]
    data = {c: {r: rng.integers(-1000, 1000, c).astype(np.float32) for r in range(world)} for c in counts}

    # leaf groups as the worker passes them: none, everyone under one leaf, and two leaves
    groupings = [(), [list(range(world))], [list(range(0, world, 2)), list(range(1, world, 2))]]

    def body(r, t):
        out = []
        for algorithm in ALGORITHMS:
            for ranks in orders:
                for c in counts:
                    for groups in groupings:
                        recv = np.full(c, np.nan, np.float32)
                        a2a.alltoall(t, data[c][r], recv, ranks, algorithm, groups)
                        out.append(recv)
        return out

    results = on_loopback(world, subflows, body, scheduler=scheduler)
    for r, got in enumerate(results):
        assert not isinstance(got, Exception), f"rank {r}: {got}"
        it = iter(got)
        for algorithm in ALGORITHMS:
            for ranks in orders:
                for c in counts:
                    for groups in groupings:
                        assert np.array_equal(next(it), reference(data[c], ranks)[r]), \
                            f"rank {r}, {algorithm}, ranks {ranks}, {c} elements, groups {groups}"


# ---- the worker's check values ---------------------------------------------------------------------
@pytest.mark.parametrize("world", [2, 3, 8, 64])
def test_check_values_follow_the_blocks(world):
    count = world * 300
    sends = {r: a2a.alltoall_inputs(count, r, world) for r in range(world)}
    want = reference(sends, list(range(world)))
    for r in range(world):
        assert np.array_equal(a2a.alltoall_expected(count, r, world), want[r])
    # every (sender, receiver, index) has its own value: nothing misplaced can read as right
    every = np.concatenate(list(sends.values()))
    assert len(np.unique(every)) == len(every) and every.max() < 2**24


def test_check_values_catch_a_swapped_block():
    world, count = 4, 4 * 1000
    got = a2a.alltoall_expected(count, 1, world).copy()
    want = got.copy()
    b = count // world
    got[:b], got[b:2 * b] = want[b:2 * b], want[:b]  # blocks from senders 0 and 1 swapped
    assert np.count_nonzero(got != want) == 2 * b
    # a block meant for another receiver, and a block shifted by one element, read as wrong too
    other = a2a.alltoall_expected(count, 2, world)
    assert np.all(other[:b] != want[:b])
    assert np.all(np.roll(want[:b], 1) != want[:b])


def test_check_values_are_exact_and_bounded():
    assert a2a.period(8) == 2**18 and a2a.period(4096) == 1
    big = a2a.alltoall_inputs(8 * 2**19, 7, 8)  # blocks longer than the period: indices wrap, values stay exact
    assert big.max() == 63 * 2**18 + 2**18 - 1 < 2**24
    with pytest.raises(ValueError, match="divisible"):
        a2a.alltoall_inputs(10, 0, 4)
    with pytest.raises(ValueError, match="4096"):
        a2a.alltoall_expected(4097 * 2, 0, 4097)
    assert len(a2a.alltoall_inputs(0, 0, 3)) == 0


# ---- formulas --------------------------------------------------------------------------------------
def test_alltoall_busbw_is_nccl_tests_formula():
    assert busbw_gbps(1_000_000_000, 1e6, 8, "alltoall") == pytest.approx(7 / 8)  # (n-1)/n
    assert busbw_gbps(1_000_000_000, 1e6, 2, "alltoall") == pytest.approx(0.5)
    assert busbw_gbps(1_000_000_000, 1e6, 8) == pytest.approx(1.75)  # all-reduce stays the default


HOSTS8 = [f"h{i}" for i in range(8)]


def test_expected_alltoall_one_switch_is_the_host_link():
    fast = leafspine(4, 1, 0, host_rate="1gbit")
    for algorithm in ALGORITHMS:
        assert expected_alltoall_busbw_gbps(fast, ["h0", "h1", "h2", "h3"], 1, algorithm=algorithm) \
            == pytest.approx(1000 * MBIT)


def test_expected_alltoall_across_leaves():
    topo = multirail(8, 2, 2, 2)  # 100 Mbit/s; h0-h3 under leaf0, h4-h7 under leaf1, 2 uplinks per leaf and plane
    # all at once: 16 flows cross each way over 2 uplinks, 8 flow-shares each, so 12.5 Mbit/s a flow; busbw 7 x 12.5
    assert expected_alltoall_busbw_gbps(topo, HOSTS8, 1, planes=[0], algorithm="oneshot") == pytest.approx(87.5 * MBIT)
    # pairwise: step k sends min(k, 8-k) flows each way across: 1, 2 run at the host rate, 3 and 4 wait on the uplinks
    pairwise = 7 / (4 / 100 + 2 * 3 / 200 + 4 / 200) * MBIT
    assert expected_alltoall_busbw_gbps(topo, HOSTS8, 1, planes=[0]) == pytest.approx(pairwise)
    assert expected_alltoall_busbw_gbps(topo, HOSTS8, 2) == pytest.approx(2 * pairwise)  # both planes
    assert expected_alltoall_busbw_gbps(leafspine(8, 2, 2), HOSTS8, 1, algorithm="oneshot") \
        == pytest.approx(87.5 * MBIT)


def test_expected_alltoall_bad_input():
    topo = multirail(4, 2, 2, 2)
    with pytest.raises(ClockfabricError, match="all-to-all needs at least 2"):
        expected_alltoall_busbw_gbps(topo, ["h0"], 1)
    with pytest.raises(ClockfabricError, match="unknown all-to-all"):
        expected_alltoall_busbw_gbps(topo, ["h0", "h1"], 1, algorithm="ring")
