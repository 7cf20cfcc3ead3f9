"""The collective: algorithms over real TCP on loopback, the formulas, the expected busbw."""

import json
import os
import random
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from clockfabric.collective import messages, ring, sending, worker
from clockfabric.collective.expected import expected_busbw_gbps
from clockfabric.collective.results import algbw_gbps, busbw_gbps, job_time_us
from clockfabric.collective.schedule import CHUNK, WINDOW_CHUNKS
from clockfabric.collective.schedulers import SCHEDULERS
from clockfabric.collective.schedulers.owd import Owd
from clockfabric.collective.sizes import format_size, parse_size, size_range
from clockfabric.collective.transport import MIN_RCVBUF, Transport, TransportError
from clockfabric.errors import USAGE_EXIT, ClockfabricError
from clockfabric.topology import leafspine, multirail

MBIT = 1e6 / 8 / 1e9  # 1 Mbit/s in GB/s


# ---- running ranks as threads on 127.0.0.1 -----------------------------------------------------
def on_loopback(world: int, subflows: int, body, *, timeout_s: float = 20.0, peers=None, absent=(),
                scheduler: str = "ecmp", rcvbuf: int | None = None, parked=()):
    """Run body(rank, transport) for every rank (but those in absent) as threads on 127.0.0.1,
    each rank connected to peers(rank) (default: everyone). Returns [(result | exception)]."""
    for _ in range(5):  # a random port range someone else holds: try another
        base = random.randrange(20000, 32000 - world)  # under the ephemeral range source ports use
        token = random.getrandbits(32)  # a concurrent test's ranks on overlapping ports are strangers
        results: list = [None] * world
        # every rank listens before any dials: a port another test holds is known at once, not
        # after the other ranks have waited out timeout_s for the rank that could not listen
        transports: dict[int, Transport] = {}
        for r in set(range(world)) - set(absent):
            try:
                transports[r] = Transport(r, [["127.0.0.1"]] * world, port_base=base, subflows=subflows,
                                          token=token, timeout_s=timeout_s, scheduler=scheduler,
                                          rcvbuf=rcvbuf, parked=parked)
            except Exception as e:  # noqa: BLE001 - handed to the test
                results[r] = e
        if any(isinstance(x, TransportError) and "cannot listen" in str(x) for x in results):
            for t in transports.values():
                t.close()
            continue

        def rank_main(r, transport, results):
            try:
                with transport as t:
                    t.connect(peers(r) if peers else set(range(world)) - {r})
                    results[r] = body(r, t)
            except Exception as e:  # noqa: BLE001 - handed to the test
                results[r] = e

        threads = [threading.Thread(target=rank_main, args=(r, t, results)) for r, t in transports.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout_s + 30)
        assert not any(t.is_alive() for t in threads), "a rank hung"
        return results
    raise AssertionError("no free port range on loopback")


def group_layouts(world: int) -> list[list[list[int]]]:
    """Ways to group world ranks for hier: one group, equal groups, groups of one."""
    layouts = [[list(range(world))], [[r] for r in range(world)]]
    for m in (2, world // 2):
        if 1 < m < world and world % m == 0:
            layouts.append([list(range(g, g + m)) for g in range(0, world, m)])
    return layouts


def check_allreduce_matches_numpy(world: int, subflows: int, counts: list[int], seed: int,
                                  scheduler: str = "ecmp") -> None:
    """Every algorithm and grouping over `world` ranks on loopback, each count of elements:
    every rank ends with numpy's sum."""
    cases = [("ring", [list(range(world))])] + [("hier", g) for g in group_layouts(world)]
    rng = np.random.default_rng(seed)
    data = {c: [rng.integers(-1000, 1000, c).astype(np.float32) for _ in range(world)] for c in counts}

    def body(r, t):
        out = []
        for algorithm, groups in cases:
            for c in counts:
                buf = data[c][r].copy()
                ring.run(algorithm, t, buf, groups)
                out.append(buf)
        return out

    results = on_loopback(world, subflows, body, scheduler=scheduler)
    errors = {r: got for r, got in enumerate(results) if isinstance(got, Exception)}
    assert not errors, errors  # every rank's, so the first to fail is seen, not just rank 0's echo of it
    for r, got in enumerate(results):
        it = iter(got)
        for algorithm, groups in cases:
            for c in counts:
                want = np.sum(data[c], axis=0)  # small integers: exact in any order
                assert np.array_equal(next(it), want), f"rank {r}, {algorithm} {groups}, {c} elements"


@pytest.mark.parametrize("subflows", [1, 2, 4, 8])
@pytest.mark.parametrize("world", [2, 3, 4, 5, 8])
def test_allreduce_matches_numpy_over_tcp(world, subflows):
    counts = [1, world * subflows - 1, world * subflows + 3, 1021, 40_003]  # none divide evenly
    check_allreduce_matches_numpy(world, subflows, counts, seed=world * 100 + subflows)


@pytest.mark.parametrize("scheduler", ["least-outstanding", "owd"])
@pytest.mark.parametrize("world", [3, 4])
def test_every_scheduler_sums_like_numpy(world, scheduler, monkeypatch):
    """The schedulers that place any chunk on any subflow: chunks of one message arrive out of
    order over 3 subflows and still land in place (ecmp's fixed shares: the tests above)."""
    monkeypatch.setattr(ring, "SLICE", 4096)  # many messages in flight per peer at once
    check_allreduce_matches_numpy(world, 3, [1, 1021, 40_003], seed=world, scheduler=scheduler)


def greedy_copies(monkeypatch) -> list[bool]:
    """Make owd's spare() greedy: whenever nothing new is to be placed, every chunk a subflow
    holds unacknowledged is copied onto another. Returns a list noting, per call, whether it copied."""
    copied = []

    def greedy(self, subs, j, lasts):
        i = next((i for i, last in enumerate(lasts) if last and i != j), None)
        copied.append(i is not None)
        return i

    monkeypatch.setattr(Owd, "spare", greedy)
    return copied


@pytest.mark.parametrize("world", [2, 3, 5])
def test_copies_of_chunks_are_kept_once_and_never_land_late(world, monkeypatch):
    """A copy read twice into a segment already summed on, or a late copy landing in a buffer
    the ring has moved on with, reads wrong."""
    copied = greedy_copies(monkeypatch)
    monkeypatch.setattr(ring, "SLICE", 4096)  # many small messages: copies race originals often
    check_allreduce_matches_numpy(world, 3, [1, 1021, 40_003], seed=world, scheduler="owd")
    assert any(copied), "no chunk was ever copied: the test did not exercise copies"


@pytest.mark.parametrize("scheduler", ["ecmp", "least-outstanding", "owd"])
def test_a_slow_subflow_is_sent_smaller_chunks_and_every_byte_lands_once(scheduler, monkeypatch):
    """The dispatcher cuts the next chunk to the chosen subflow's size. Loopback is fast, and the
    kernel seldom measures its rate (app-limited), so here every ack reads 3 Mbit/s: a subflow
    of a spine uplink shared by 8 in the lab (its real path runs in the contention lab test)."""
    slow = 3e6 / 8 / 1e9  # bytes per ns
    monkeypatch.setattr(sending, "delivery_rate", lambda sock: slow)
    count, messages = 1 << 18, 4  # 1 MiB messages
    want = lambda k: np.arange(count, dtype=np.float32) + k

    def body(r, t):
        buf = np.empty(count, np.float32)  # one buffer, rewritten once each exchange returns
        for k in range(messages):
            buf[:] = want(k) if r == 0 else np.nan
            t.exchange(**{"sends" if r == 0 else "recvs": [(1 - r, memoryview(buf).cast("B"))]})
            if r == 1:
                np.testing.assert_array_equal(buf, want(k))
            buf.fill(-1)  # a piece still unsent once the message counts as sent would land as -1
        return t.stats()

    sent, got = on_loopback(2, 2, body, scheduler=scheduler)
    assert not isinstance(sent, Exception), sent
    assert not isinstance(got, Exception), got  # rank 1 received every message whole and in place
    chunks, whole = sum(row["chunks"] for row in sent), messages * 4 * count // CHUNK
    # each subflow's first window goes out whole, before its first ack; after it, every 64 KiB
    # chunk is cut in two at least (30000 bytes, and the rest); uncut, there would be `whole`
    assert chunks >= 2 * whole - 2 * WINDOW_CHUNKS, f"{chunks} chunks for {whole} of {CHUNK} bytes"


def test_owd_copies_the_bytes_only_of_chunks_it_may_send_again(monkeypatch):
    """A chunk's bytes are copied only when another subflow takes a copy, or when its message
    completes while it is still unacknowledged: a window per subflow at most, not every byte."""
    copied, count, messages = [0], 1 << 20, 8  # 4 MiB messages

    def counting(data):
        copied[0] += len(data) if isinstance(data, memoryview) else 0
        return bytes(data)

    monkeypatch.setattr(sending, "bytes", counting, raising=False)

    def body(r, t):
        buf = np.ones(count, np.float32)
        for _ in range(messages):
            t.exchange(**{"sends" if r == 0 else "recvs": [(1 - r, memoryview(buf).cast("B"))]})

    assert on_loopback(2, 4, body, scheduler="owd") == [None, None]
    assert copied[0] <= messages * 4 * WINDOW_CHUNKS * CHUNK, f"{copied[0]} bytes copied of {messages * 4 * count} sent"


def test_a_sent_buffer_is_the_callers_again_while_copies_of_its_chunks_are_in_flight(monkeypatch):
    """Once a send completes, its sender overwrites the buffer: the chunks it may still copy
    must hold the bytes as sent, and the receiver, which posts late, must get those bytes
    whichever copy of each chunk reaches it first."""
    copied = greedy_copies(monkeypatch)
    count, messages = 64 << 10, 12  # 256 KiB each: four chunks, and the windows hold three messages

    def body(r, t):
        buf = np.empty(count, np.float32)
        if r == 0:
            stale = 0
            for k in range(messages):
                buf[:] = np.arange(count, dtype=np.float32) + k
                sent = bytes(memoryview(buf).cast("B"))
                t.exchange(sends=[(1, memoryview(buf).cast("B"))])
                buf.fill(np.nan)  # the caller's again: a copy read from it now would land NaNs
                out = t.outbound[1]
                with out.cv:
                    kept = [u for held in out.unacked for u in held if u.seq == k and u.body is not None]
                    stale += sum(bytes(u.body) != sent[u.start:u.end] for u in kept)
            return stale
        time.sleep(0.3)  # let the sender get ahead, so copies go out after their message completed
        wrong = 0
        for k in range(messages):
            t.exchange(recvs=[(0, memoryview(buf).cast("B"))])
            wrong += int(np.count_nonzero(buf != np.arange(count, dtype=np.float32) + k))
        return wrong

    assert on_loopback(2, 3, body, scheduler="owd") == [0, 0]
    assert any(copied), "no chunk was ever copied: the test did not exercise copies"


@pytest.mark.parametrize("subflows", [1, 3])
@pytest.mark.parametrize("world", [2, 3, 5, 8])
def test_pipelined_ring_with_many_slices_matches_numpy(world, subflows, monkeypatch):
    """Segments cut into many slices, each going on to the next step as soon as it is in: a
    slice sent before its sum is complete, or landing on data not yet sent on, reads wrong."""
    monkeypatch.setattr(ring, "SLICE", 256)  # 64 float32s: up to dozens of slices per step
    check_allreduce_matches_numpy(world, subflows, [world * 64 - 1, 4001], seed=world * 10 + subflows)


def test_peers_are_what_the_algorithms_use():
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert ring.peers("ring", 0, groups) == {1, 7}
    assert ring.peers("hier", 0, groups) == {1, 3, 4}  # group ring neighbours, and rank 4 across
    assert ring.peers("hier", 5, groups) == {4, 6, 1}
    assert ring.peers("ring", 0, [[0, 1]]) == {1}
    # what each rank sends to: its right-hand neighbour in each of its rings
    assert ring.successors("ring", 0, groups) == {1} and ring.successors("ring", 7, groups) == {0}
    assert ring.successors("hier", 0, groups) == {1, 4} and ring.successors("hier", 5, groups) == {6, 1}
    assert ring.successors("ring", 0, [[0, 1]]) == {1}
    with pytest.raises(ValueError, match="one size"):
        ring.hier_allreduce(type("L", (), {"rank": 0})(), np.zeros(4, np.float32), [[0, 1], [2]])


def test_subflows_carry_equal_shares_of_a_message():
    """Each subflow of a pair gets its own slice: one message, four connections, all busy."""
    got = {}

    def body(r, t):
        if r == 0:
            t.exchange(sends=[(1, memoryview(np.arange(10, dtype=np.float32)).cast("B"))])
        else:
            buf = np.zeros(10, np.float32)
            t.exchange(recvs=[(0, memoryview(buf).cast("B"))])
            got["buf"] = buf
        return [s.getsockname() for s in t.outbound[1 - r].socks]

    res = on_loopback(2, 4, body)
    assert np.array_equal(got["buf"], np.arange(10, dtype=np.float32))
    assert len({addr[1] for addr in res[0]}) == 4  # four connections, four source ports (ECMP spreads them)
    assert ring.bounds(40, 4) == [0, 10, 20, 30, 40] and ring.bounds(3, 4) == [0, 0, 1, 2, 3]


def test_subflows_run_cubic_where_the_kernel_lets_them():
    """A subflow asks for CUBIC (this machine's BBR starves some flows behind shaped links); where
    it may not choose (no CAP_NET_ADMIN, or no cubic), it keeps the kernel's default."""
    with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
        available = f.read().split()
    with open("/proc/sys/net/ipv4/tcp_allowed_congestion_control") as f:
        allowed = f.read().split()
    with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
        default = f.read().strip()
    res = on_loopback(2, 2, lambda r, t: [row["congestion"] for row in t.stats()])
    may_choose = "cubic" in available and (os.geteuid() == 0 or "cubic" in allowed)
    assert res == [["cubic"] * 2] * 2 if may_choose else res == [[default] * 2] * 2, (res, available, default)


def test_a_peer_that_never_connects_is_an_error_not_a_hang():
    t0 = time.monotonic()
    results = on_loopback(3, 2, lambda r, t: "ok", timeout_s=1.0, absent={2})
    assert time.monotonic() - t0 < 10
    assert isinstance(results[0], TransportError) and "rank 2" in str(results[0])
    assert "within 1 s" in str(results[0])


def test_a_peer_that_stops_mid_transfer_is_an_error_not_a_hang():
    def body(r, t):
        if r == 1:
            return "left"  # closes its subflows without sending what rank 0 waits for
        buf = np.zeros(1 << 16, np.float32)
        t.exchange(recvs=[(1, memoryview(buf).cast("B"))])

    t0 = time.monotonic()
    results = on_loopback(2, 2, body, timeout_s=5.0)
    assert time.monotonic() - t0 < 5
    assert isinstance(results[0], TransportError) and "link to rank 1 failed" in str(results[0])


def test_a_peer_silent_on_every_subflow_is_an_error_within_the_timeout():
    """Connected, owing us a message, and sending nothing on any subflow: that is a stall, however
    quiet a single subflow may rightly be while its siblings carry the peer's bytes."""
    def body(r, t):
        if r == 1:
            time.sleep(4)  # alive and connected, but sends nothing
            return "late"
        buf = np.zeros(1 << 16, np.float32)
        t0 = time.monotonic()
        try:
            t.exchange(recvs=[(1, memoryview(buf).cast("B"))])
        except TransportError as e:
            return e, time.monotonic() - t0

    results = on_loopback(2, 2, body, timeout_s=1.0)
    error, took = results[0]
    assert "link to rank 1 failed" in str(error) and "no progress for 1 s" in str(error), error
    assert took < 3, took


def test_a_peer_that_closes_once_it_has_everything_is_not_a_failure(monkeypatch):
    """The receiver may have our last bytes, and close, before our sender thread has counted
    them (a busy machine preempts it right after the write): that is a finished exchange."""
    progress = messages.Latch.progress

    def slow_sender(latch):
        progress(latch)
        if threading.current_thread().name.startswith("send-"):
            time.sleep(0.5)  # preempted between writing the last piece and counting it

    monkeypatch.setattr(messages.Latch, "progress", slow_sender)
    buf = np.arange(1 << 14, dtype=np.float32)

    def body(r, t):
        if r == 0:
            t.exchange(sends=[(1, memoryview(buf).cast("B"))])
            return "sent"
        got = np.empty_like(buf)
        t.exchange(recvs=[(0, memoryview(got).cast("B"))])
        return bool(np.array_equal(got, buf))  # then closes at once

    assert on_loopback(2, 1, body, timeout_s=5.0) == ["sent", True]


def test_a_receive_posted_long_before_its_wait_is_not_a_stall():
    """The pipelined ring posts every step's receives up front: one may wait many seconds for
    its first byte, which is no stall until someone waits on it."""
    from types import SimpleNamespace

    latch = messages.Latch()
    latch.add()
    latch.last -= 60  # posted a minute ago, nothing in yet
    pending = messages.Pending(SimpleNamespace(timeout_s=0.5, broken=None), latch)
    threading.Timer(1.3, latch.finish).start()  # arrives after the wait's first stall check (1 s)
    pending.wait()
    assert latch.pending == 0


# ---- the worker's inputs and arguments --------------------------------------------------------------
@pytest.mark.parametrize("world", [2, 5, 8, 64, 100])
def test_worker_inputs_sum_exactly(world):
    count = 5000
    stack = np.stack([worker.inputs(count, r) for r in range(world)])
    assert np.array_equal(worker.expected(count, world), stack.astype(np.float64).sum(axis=0))
    acc = np.zeros(count, np.float32)
    for r in reversed(range(world)):  # float32, another order: still exact
        acc += stack[r]
    assert np.array_equal(acc, worker.expected(count, world))
    assert not np.array_equal(worker.expected(count, world), worker.expected(count, world - 1))


def test_a_fixed_receive_buffer_stays_fixed_under_load_and_bounds_the_window():
    """rcvbuf turns autotuning off: after a megabyte each subflow's buffer is the size set (half
    of it asked, doubled by the kernel), where autotuning would have grown it, and the window
    the sender was offered is never over that size, whatever the kernel's ratio."""
    def body(r, t):
        buf = np.arange(1 << 18, dtype=np.float32) * (r + 1)  # 1 MiB
        ring.run("ring", t, buf, [[0, 1]])
        socks = [s for link in t.inbound.values() for s in link.socks]
        # a window reads 0 while the peer has yet to read what it holds (its ring may end after
        # ours): read again until the peer has, every reading kept
        offered, deadline = [], time.monotonic() + 2.0
        while not offered or max(offered[-1]) == 0 and time.monotonic() < deadline:
            offered.append([offered_window(s) for link in t.outbound.values() for s in link.socks])
            time.sleep(0.005)
        return [s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) for s in socks], offered, buf

    for rcvbuf in (16 << 10, 48 << 10):
        res = on_loopback(2, 2, body, rcvbuf=rcvbuf)
        assert not any(isinstance(x, Exception) for x in res), res
        for sizes, offered, buf in res:
            assert sizes == [rcvbuf] * 2
            # never over the size; and open once the peer has read
            assert all(window <= rcvbuf for reading in offered for window in reading), (rcvbuf, offered)
            assert max(offered[-1]) > 0, (rcvbuf, offered)
            assert np.array_equal(buf, np.arange(1 << 18, dtype=np.float32) * 3)


def offered_window(sock: socket.socket) -> int:
    """The window the peer last advertised to this sender (struct tcp_info's tcpi_snd_wnd)."""
    return struct.unpack_from("I", sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232), 228)[0]


def opts(**fields) -> str:
    """Worker --options as JSON, written by hand so that bad values reach the worker."""
    return json.dumps({"port_base": 1, **fields})


PAIR = ["--world", "2", "--peer", "a=x", "--peer", "b=y"]


@pytest.mark.parametrize("args, message", [
    (["--rank", "0", *PAIR, "--sizes", "4", "--options", opts(rcvbuf=100)],
     "--options: --rcvbuf must be 0 (the kernel's autotuning) or at least 8192 bytes; got 100"),
    (["--rank", "0", *PAIR, "--sizes", "4", "--options", opts(rcvbuf_budget=100)],
     "--rcvbuf-budget must be 0 (none) or at least 8192"),
    (["--rank", "0", *PAIR, "--sizes", "4", "--options", opts(scheduler="fastest")],
     "no scheduler named 'fastest'; schedulers are ecmp, least-outstanding, owd"),
    (["--rank", "0", *PAIR, "--sizes", "4", "--options", opts(bogus=1)], "collective options have no 'bogus'"),
    (["--rank", "0", *PAIR, "--sizes", "4", "--options", "{port_base"], "collective options are not JSON"),
    (["--rank", "0", *PAIR, "--sizes", "4", "--options", "{}"], "--options needs a port_base"),
    (["--rank", "0", "--world", "1", "--peer", "a=1.2.3.4", "--sizes", "4", "--options", opts()], "at least 2"),
    (["--rank", "3", *PAIR, "--sizes", "4", "--options", opts()], "outside"),
    (["--rank", "0", *PAIR, "--sizes", "6", "--options", opts()], "multiples"),
    (["--rank", "0", "--world", "2", "--peer", "a=x", "--peer", "b", "--sizes", "4", "--options", opts()], "NAME=ADDR"),
    (["--rank", "0", *PAIR, "--sizes", "8", "--options", opts(collective="alltoall", algorithm="ring")],
     "'ring' is not an all-to-all algorithm; use pairwise or oneshot"),
    (["--rank", "0", *PAIR, "--sizes", "8", "--options", opts(algorithm="oneshot")],
     "'oneshot' is not an all-reduce algorithm; use ring or hier"),
    (["--rank", "0", *PAIR, "--sizes", "12", "--options", opts(collective="alltoall")],
     "multiples of 4 * world = 8 bytes"),
])
def test_worker_bad_arguments_are_one_line(args, message):
    proc = subprocess.run([sys.executable, "-m", "clockfabric.collective.worker", *args],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# ---- formulas and sizes ----------------------------------------------------------------------------
def test_busbw_is_nccl_tests_formula():
    assert algbw_gbps(1_000_000_000, 1e6) == pytest.approx(1.0)  # 1e9 B in 1 s
    assert busbw_gbps(1_000_000_000, 1e6, 8) == pytest.approx(1.75)  # 2(n-1)/n
    assert busbw_gbps(1_000_000_000, 1e6, 2) == pytest.approx(1.0)
    assert busbw_gbps(1_000_000_000, 1e6, 4, "alltoall") == pytest.approx(0.75)
    assert busbw_gbps(64 << 20, 1e6, 8) == pytest.approx(67108864 / 1e9 * 1.75)


def test_job_time_is_the_slowest_ranks_mean_over_back_to_back_iterations():
    # rank 1 finished iteration 1 late; rank 0, ahead, waited for it inside iteration 2: a
    # per-iteration maximum over ranks would count that wait twice (300 us, not 200)
    assert job_time_us([[100.0, 300.0], [300.0, 100.0]]) == 200.0
    assert job_time_us([[100.0, 100.0], [250.0, 250.0], [50.0]]) == 250.0


def test_sizes_parse_like_nccl_tests():
    assert parse_size("1M") == 1 << 20 and parse_size("512K") == 512 << 10 and parse_size("4096") == 4096
    assert parse_size("8MiB") == 8 << 20 and parse_size("1g") == 1 << 30
    assert size_range(1 << 20, 8 << 20) == [1 << 20, 2 << 20, 4 << 20, 8 << 20]
    assert size_range(1000, 1000) == [1000]
    assert format_size(1 << 20) == "1M" and format_size(1536) == "1536"
    for bad in ("1Q", "", "-4", "0"):
        with pytest.raises(ClockfabricError):
            parse_size(bad)
    with pytest.raises(ClockfabricError, match="above"):
        size_range(8, 4)


def test_worker_connects_to_the_barrier_ring_and_the_collective_peers():
    base = ["--world", "5", "--sizes", "20"] + [f"--peer=h{r}=x{r}" for r in range(5)]
    a2a = worker.parse_args(["--rank", "0", "--options", opts(collective="alltoall"), *base])
    assert a2a.options.algorithm == "pairwise" and worker.barrier_algorithm(a2a) == "ring"
    assert worker.collective_peers(a2a) == {1, 2, 3, 4}
    ar = worker.parse_args(["--rank", "0", "--options", opts(), *base])
    assert ar.options.algorithm == "ring" and worker.collective_peers(ar) == {1, 4}


def test_holding_ranks_check_rarely_and_stop_after_the_same_iteration(monkeypatch):
    """Holding, each check whether to stop is an all-reduce: the ranks check once per
    HOLD_CHECK_S of iterations, paced by the slowest rank, and agree where to stop."""
    monkeypatch.setattr(worker, "HOLD_CHECK_S", 0.1)
    stop_at = time.monotonic() + 1.0
    monkeypatch.setattr(worker, "released", lambda: time.monotonic() > stop_at)
    checks, paces, slowest = [0, 0], set(), []
    anyone = worker.anyone

    def counted(links, args, flag, took_s):
        checks[args.rank] += 1
        stop, slowest_s = anyone(links, args, flag, took_s)
        paces.add(slowest_s >= 0.015)
        slowest.append(slowest_s)
        return stop, slowest_s

    monkeypatch.setattr(worker, "anyone", counted)

    def body(r, t):
        args = worker.parse_args(["--rank", str(r), "--world", "2", "--sizes", "4", "--options", opts(),
                                  "--peer=h0=127.0.0.1", "--peer=h1=127.0.0.1"])
        iterations = []
        worker.hold(t, args, lambda: None, lambda: (iterations.append(1), time.sleep(0.005 + 0.01 * r)))
        return len(iterations)

    done = on_loopback(2, 1, body)
    assert done[0] == done[1], f"ranks stopped after {done} iterations"
    assert paces == {True}, "a check handed back a pace quicker than rank 1's 15 ms iterations"
    # one check per 0.1 s of the slowest rank's iterations, after batches of 1, 2 and 4: about 7
    # per check at rank 1's 15 ms (not 20, rank 0's pace); judged by the pace the checks handed back,
    # which a busy machine stretches past 15 ms
    per_check = 0.1 / statistics.median(slowest)
    assert 0.6 * per_check <= done[0] / checks[0] <= 1.5 * per_check, \
        f"{done[0]} iterations, {checks[0]} checks, {per_check:.1f} iterations a check at the slowest pace"
    assert checks[0] == checks[1]


@pytest.mark.parametrize("args, message", [
    (["alltoall", "--algorithm", "ring"], "'ring' is not an all-to-all algorithm; use pairwise or oneshot"),
    (["allreduce", "--algorithm", "pairwise"], "'pairwise' is not an all-reduce algorithm; use ring or hier"),
    (["alltoall", "--scheduler", "fastest"], "no scheduler named 'fastest'; schedulers are ecmp, least-outstanding"),
    (["alltoall", "--placement", "random"], "--placement 'random' is unknown"),
    (["alltoall", "--sizes", "1Q"], "does not parse"),
    (["allreduce", "--rcvbuf", "1K"], "--rcvbuf must be 0 (the kernel's autotuning) or at least 8192 bytes"),
    (["alltoall", "--rcvbuf-budget", "1K"], "--rcvbuf-budget must be 0 (none) or at least 8192 bytes"),
])
def test_cli_bad_collective_options_are_one_line(cli, args, message):
    proc = cli("bench", *args, "--lab", "nosuchlab", check=False)
    text = " ".join(proc.stderr.split())  # rich wraps a long line at 80 columns when stderr is no terminal
    assert proc.returncode == USAGE_EXIT, proc.stderr
    assert message in text and text.count("error:") == 1 and "Traceback" not in text, proc.stderr


def test_nccl_table_names_the_collective():
    from clockfabric.bench.collective.command import _nccl_table
    from clockfabric.collective.results import CollectiveResult, Row

    row = Row(size_bytes=1 << 20, count=(1 << 20) // 16, time_us=1e5, algbw_gbps=algbw_gbps(1 << 20, 1e5),
              busbw_gbps=busbw_gbps(1 << 20, 1e5, 4, "alltoall"), wrong=0)
    res = CollectiveResult(fleet="x", hosts=["h0", "h1", "h2", "h3"], algorithm="pairwise", subflows=1, planes=[0],
                           iters=1, warmup=0, port_base=20000, expected_busbw_gbps=0.01, rows=[row],
                           collective="alltoall")
    table = _nccl_table(res)
    assert "# all-to-all (pairwise): 4 ranks" in table and "busbw = algbw * (n-1)/n;" in table
    assert "65536  float   none" in table and res.as_dict()["collective"] == "alltoall"
    res.collective, res.algorithm = "allreduce", "ring"
    assert "busbw = algbw * 2(n-1)/n" in _nccl_table(res) and "float    sum" in _nccl_table(res)


def test_cli_bad_sizes_are_one_line(cli):
    proc = cli("bench", "allreduce", "--lab", "nosuchlab", "--sizes", "1Q", check=False)
    assert proc.returncode == USAGE_EXIT
    assert "does not parse" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli("bench", "allreduce", "--lab", "nosuchlab", "--sizes", "1M", "--min-bytes", "1K", check=False)
    assert proc.returncode == USAGE_EXIT and "either --sizes" in proc.stderr


# ---- expected busbw --------------------------------------------------------------------------------
HOSTS8 = [f"h{i}" for i in range(8)]


def test_expected_busbw_dual_plane():
    topo = multirail(8, 2, 2, 2)  # 100 Mbit/s everywhere; h0-h3 under leaf0, h4-h7 under leaf1
    assert expected_busbw_gbps(topo, HOSTS8, 1) == pytest.approx(100 * MBIT)  # one plane's host link
    assert expected_busbw_gbps(topo, HOSTS8, 2) == pytest.approx(200 * MBIT)  # both planes
    assert expected_busbw_gbps(topo, HOSTS8, 8) == pytest.approx(200 * MBIT)
    assert expected_busbw_gbps(topo, HOSTS8, 4, planes=[1]) == pytest.approx(100 * MBIT)
    # 3 subflows on 2 planes: plane 0 carries 2/3 of each hop's bytes and limits it
    assert expected_busbw_gbps(topo, HOSTS8, 3) == pytest.approx(150 * MBIT)


def test_expected_busbw_shares_oversubscribed_uplinks():
    topo = multirail(8, 2, 2, 2)
    zigzag = ["h0", "h4", "h1", "h5", "h2", "h6", "h3", "h7"]  # every hop crosses leaves: 4 hops per 2 uplinks
    assert expected_busbw_gbps(topo, zigzag, 1, planes=[0]) == pytest.approx(50 * MBIT)
    assert expected_busbw_gbps(topo, zigzag, 2) == pytest.approx(100 * MBIT)
    # hier: 3/4 of the buffer at 100 twice (in the leaves), 1/4 at 50 (4 ranks per leaf share 2 uplinks)
    hier = 1.75 / (1.5 / 100 + 0.25 / 50) * MBIT
    assert expected_busbw_gbps(topo, HOSTS8, 1, algorithm="hier") == pytest.approx(hier)


def test_expected_busbw_leaf_spine():
    assert expected_busbw_gbps(leafspine(8, 2, 2), HOSTS8, 1) == pytest.approx(100 * MBIT)
    slow = leafspine(4, 2, 1, fabric_rate="50mbit")  # the ring's leaf crossing runs over one 50 Mbit/s spine link
    assert expected_busbw_gbps(slow, ["h0", "h1", "h2", "h3"], 4) == pytest.approx(50 * MBIT)
    two = leafspine(4, 2, 2, fabric_rate="50mbit")  # two spines: ECMP spreads the crossing over both
    assert expected_busbw_gbps(two, ["h0", "h1", "h2", "h3"], 4) == pytest.approx(100 * MBIT)
    fast = leafspine(4, 1, 0, host_rate="1gbit")
    assert expected_busbw_gbps(fast, ["h0", "h1"], 1) == pytest.approx(1000 * MBIT)


def test_expected_busbw_bad_input():
    topo = multirail(4, 2, 2, 2)
    with pytest.raises(ClockfabricError, match="at least 2"):
        expected_busbw_gbps(topo, ["h0"], 1)
    with pytest.raises(ClockfabricError, match="same number"):
        expected_busbw_gbps(topo, ["h0", "h1", "h2"], 1, algorithm="hier")


def test_a_resize_reaches_the_peers_receive_buffer_and_every_byte_still_lands():
    """Transport.resize asks the peer, in-band, for a new receive buffer on one subflow: the
    peer applies it (never under MIN_RCVBUF) before the chunks
    queued after it, and the data is untouched."""
    def body(r, t):
        if r == 0:
            t.resize(1, 0, 40 << 10)
            t.resize(1, 1, 100)
        buf = np.arange(1 << 18, dtype=np.float32) * (r + 1)  # 1 MiB: every subflow carries chunks
        ring.run("ring", t, buf, [[0, 1]])
        sizes = [s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) for s in t.inbound[1 - r].socks]
        offered = [offered_window(s) for s in t.outbound[1 - r].socks]
        return sizes, [row["peer_rcvbuf"] for row in t.stats()], buf, offered

    res = on_loopback(2, 2, body, rcvbuf=16 << 10)
    assert not any(isinstance(x, Exception) for x in res), res
    (sizes0, asked0, buf0, offered0), (sizes1, asked1, buf1, offered1) = res
    assert sizes1 == [40 << 10, MIN_RCVBUF]  # rank 1 holds what rank 0 asked for
    assert offered0[0] <= 40 << 10 and offered0[1] <= MIN_RCVBUF, offered0  # and offers no wider window
    assert sizes0 == [16 << 10] * 2  # rank 1 asked nothing: rank 0 keeps the fixed size
    assert asked0 == [40 << 10, MIN_RCVBUF] and asked1 == [16 << 10] * 2
    for buf in (buf0, buf1):
        assert np.array_equal(buf, np.arange(1 << 18, dtype=np.float32) * 3)


@pytest.mark.parametrize("scheduler", SCHEDULERS.names())
def test_a_parked_subflow_carries_nothing_until_put_to_work(scheduler):
    """Standbys are dialled up front and parked: no scheduler gives one a chunk (or a probe).
    Put to work, it carries its part; parked again, it takes nothing new. The last subflow at
    work to a peer cannot be parked. The kernel's counters show which subflows were busy."""
    mib = np.arange(1 << 18, dtype=np.float32)

    def body(r, t):
        peer = 1 - r
        sent = []
        dialled = t.counters(peer, 1)  # the standby's hello, sent as it was dialled, is all it carried yet
        for phase in ("parked", "working", "parked again"):
            if r == 0 and phase == "working":
                t.park(peer, 1, parked=False)
            if r == 0 and phase == "parked again":
                t.park(peer, 1)
            before = [row["bytes"] for row in t.stats()]
            buf = mib * (r + 1)
            ring.run("ring", t, buf, [[0, 1]])
            assert np.array_equal(buf, mib * 3)
            sent.append([row["bytes"] - b for row, b in zip(t.stats(), before)])
        with pytest.raises(ValueError, match="last at work"):
            t.park(peer, 0)
        return sent, t.counters(peer, 0), t.counters(peer, 1), dialled

    res = on_loopback(2, 2, body, scheduler=scheduler, parked=[1])
    assert not any(isinstance(x, Exception) for x in res), res
    (sent, busy, standby, _), (other, _, idle, idle_dialled) = res
    assert sent[0][0] > 0 and sent[0][1] == 0  # parked: nothing
    assert sent[1][1] > 0  # at work: its part
    assert sent[2][1] == 0 and sent[2][0] > 0  # parked again
    assert other[1][1] == 0  # rank 1 never put its standby to work
    # the kernel counts busy time in jiffies, too coarse to see a loopback burst every time; a
    # subflow that sent nothing after its hello gains none (the hello's own may round up to a
    # jiffy where a tick falls before its ack)
    assert busy is not None and standby is not None and idle.retrans == 0
    assert idle.busy_us == idle_dialled.busy_us, (idle_dialled, idle)


@pytest.mark.parametrize("scheduler", SCHEDULERS.names())
def test_a_subflow_parked_longer_than_the_timeout_is_not_a_failure(scheduler):
    """A standby may stay parked for a whole job: its receiving end hears nothing for far longer
    than the kernel timeout while the peer's messages keep arriving on the other subflow. That is
    quiet, not a dead link (a 2-spine all-reduce of 68 s failed so with a 60 s timeout)."""
    small = np.arange(1 << 12, dtype=np.float32)

    def body(r, t):
        end, rounds, done = time.monotonic() + 2.5, 0, False
        while not done:
            buf = small * (r + 1)
            buf[0] = time.monotonic() > end  # the ranks stop together: once either's time is up
            ring.run("ring", t, buf, [[0, 1]])
            assert np.array_equal(buf[1:], small[1:] * 3)
            rounds, done = rounds + 1, buf[0] > 0
        return rounds, [row["bytes"] for row in t.stats()]

    res = on_loopback(2, 2, body, timeout_s=0.5, scheduler=scheduler, parked=[1])
    assert not any(isinstance(x, Exception) for x in res), res
    for rounds, carried in res:
        assert rounds > 10 and carried[0] > 0 and carried[1] == 0


def test_every_subflow_parked_is_refused():
    with pytest.raises(ValueError, match="must not be parked"):
        Transport(0, [["127.0.0.1"]] * 2, port_base=1, subflows=2, parked=[0, 1])
