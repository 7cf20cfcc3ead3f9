"""The collective's schedulers (schedulers/, over schedule.SubflowState) on a tiny
discrete-event simulator of subflows whose rate and one-way delay follow a trace, driven as
the transport drives them: a dispatcher cuts a message with plan(), asks pick() for each
chunk and waits for the next ack when it says None;
acks carry the chunk's one-way delay (with the wait behind the subflow's earlier bytes) and the
path's delivery rate, as the transport reads it from the kernel."""

import heapq
from itertools import pairwise

import pytest

from clockfabric.collective.schedule import (
    CHUNK,
    CHUNK_NS,
    EWMA,
    FLOOR_AGE,
    MIN_CHUNK,
    PROBE_EVERY,
    WINDOW_CHUNKS,
    SubflowState,
    take,
)
from clockfabric.collective.schedulers import SCHEDULERS, scheduler
from clockfabric.errors import ClockfabricError

ecmp, least_outstanding, owd = (scheduler(name).choose for name in ("ecmp", "least-outstanding", "owd"))
spare = scheduler("owd").spare


def pick(name, subs, queues):
    return scheduler(name).pick(subs, queues)


def plan(name, size, subs):
    return scheduler(name).plan(size, subs)


def probes(name, subs):
    return scheduler(name).probes(subs)

BASE_NS = 10_000  # one-way delay of an idle path, each way (the acks come back over it)
FAST = 1.25  # bytes per ns: 10 Gb/s
T_FAST = CHUNK / FAST  # ns a chunk takes on the wire of a fast subflow
CONGESTED_NS = 5_000_000  # queueing on a congested spine
WINDOW = WINDOW_CHUNKS * CHUNK  # a fast subflow's window


# ---- the simulator -----------------------------------------------------------------------------
class Path:
    """A subflow's path: serves its chunks FIFO at a rate, then delays them. Rate and delay follow
    a trace of (from ns, rate in bytes/ns, one-way delay ns) steps, read when a chunk starts."""

    def __init__(self, rate: float = FAST, *steps: tuple[float, float, float]) -> None:
        self.trace, self.free = [(0.0, rate, BASE_NS), *steps], 0.0

    def at(self, t: float) -> tuple[float, float]:
        return next(step for step in reversed(self.trace) if step[0] <= t)[1:]


class Sim:
    """Messages of n chunks, each sent once the previous has arrived whole (as a ring's steps)."""

    def __init__(self, name: str, paths: list[Path]) -> None:
        self.scheduler, self.paths, self.subs = scheduler(name), paths, [SubflowState() for _ in paths]
        self.t, self.acks, self.sends = 0.0, [], []  # acks: a heap by arrival; sends: (time, subflow, a, b)

    def deliver(self, until: float) -> None:
        while self.acks and self.acks[0][0] <= until:
            _, _, i, length, ahead, delay_ns, rate = heapq.heappop(self.acks)
            self.subs[i].on_ack(length, ahead, delay_ns, rate)

    def message(self, n: int) -> tuple[float, list[int], dict[int, float]]:
        """Send a message of n chunks: its time (first send to last byte in), the subflow of each
        chunk as sent and when each subflow's last byte of it arrived (ns after the start)."""
        start, placed, ends = self.t, [], {}
        queues = self.scheduler.plan(n * CHUNK, self.subs)
        while any(queues):
            self.deliver(self.t)
            for j in self.scheduler.probes(self.subs):  # a header alone: the path's delay, no bytes
                ahead = self.subs[j].on_probe()
                _, delay = self.paths[j].at(max(self.t, self.paths[j].free))
                begin = max(self.t, self.paths[j].free)
                heapq.heappush(self.acks, (begin + delay + BASE_NS, len(self.sends), j, 0, ahead,
                                           round(begin + delay - self.t), None))
                self.sends.append((self.t, j, 0, 0))
            while (i := self.scheduler.pick(self.subs, queues)) is None:
                self.t = self.acks[0][0]  # wait for an ack (none pending would be a deadlock)
                self.deliver(self.t)
            a, b = take(self.scheduler.queue(queues, i), self.subs[i].chunk)
            assert self.subs[i].outstanding < self.subs[i].window
            ahead = self.subs[i].on_send(b - a)
            path = self.paths[i]
            begin = max(self.t, path.free)  # behind the subflow's earlier bytes
            rate, delay = path.at(begin)
            path.free = begin + (b - a) / rate
            ends[i] = path.free + delay - start
            ack = (path.free + delay + BASE_NS, len(self.sends), i, b - a, ahead, round(begin + delay - self.t), rate)
            heapq.heappush(self.acks, ack)
            self.sends.append((self.t, i, a, b))
            placed.append(i)
        self.t = start + max(ends.values())
        return self.t - start, placed, ends


def run(scheduler: str, paths: list[Path], n: int, messages: int) -> tuple[Sim, list[tuple[float, float, list[int]]]]:
    """Messages back to back: the simulator and, per message, (start, time, subflow per chunk)."""
    sim, out = Sim(scheduler, paths), []
    for _ in range(messages):
        start = sim.t
        elapsed, placed, _ = sim.message(n)
        out.append((start, elapsed, placed))
    return sim, out


def shares(placed: list[int], n_subs: int) -> list[int]:
    return [placed.count(i) for i in range(n_subs)]


# ---- 1. ecmp -----------------------------------------------------------------------------------
@pytest.mark.parametrize("rates", [(FAST, FAST), (FAST, FAST / 4), (FAST, 2 * FAST, FAST / 2), (FAST,) * 4])
def test_ecmp_gives_every_subflow_an_equal_contiguous_share_whatever_the_rates(rates):
    sim, n, m = Sim("ecmp", [Path(r) for r in rates]), 24 * len(rates), len(rates)
    for _ in range(3):  # what the subflows learn changes nothing
        elapsed, placed, _ = sim.message(n)
        assert shares(placed, m) == [24] * m
        ranges = [sorted((a, b) for _, j, a, b in sim.sends[-n:] if j == i) for i in range(m)]
        assert [(r[0][0], r[-1][1]) for r in ranges] == [(i * 24 * CHUNK, (i + 1) * 24 * CHUNK) for i in range(m)]
        assert all(x[1] == y[0] for r in ranges for x, y in pairwise(r))  # contiguous
        slowest = 24 * CHUNK / min(rates) + BASE_NS  # its share on its own wire: the shares run side by side
        assert slowest - 1 <= elapsed <= slowest + 2 * BASE_NS


# ---- 2. least-outstanding ----------------------------------------------------------------------
def test_least_outstanding_sends_more_on_the_faster_subflow_within_the_window():
    sim, out = run("least-outstanding", [Path(FAST), Path(FAST / 2)], 96, 4)  # the sim asserts the window
    fast, slow = shares([i for _, _, placed in out for i in placed], 2)
    assert fast / slow == pytest.approx(2.0, rel=0.15)
    sim.deliver(float("inf"))
    assert all(s.outstanding == 0 for s in sim.subs)  # every ack came back


def test_least_outstanding_takes_the_emptiest_subflow_and_ties_to_the_first():
    subs = [SubflowState(outstanding=2 * CHUNK), SubflowState(outstanding=CHUNK), SubflowState(outstanding=CHUNK)]
    assert least_outstanding(subs, CHUNK, [8]) == 1


# ---- 3. owd on a trace -------------------------------------------------------------------------
JUMP_NS, BACK_NS = 5e6, 40e6  # subflow 1's path: a spine congests at 5 ms, clears at 40 ms


def congested() -> list[Path]:
    hot = Path(FAST, (JUMP_NS, FAST / 4, BASE_NS + CONGESTED_NS), (BACK_NS, FAST, BASE_NS))
    return [Path(), hot, Path(), Path()]


HOT = (JUMP_NS + 2 * CONGESTED_NS, BACK_NS - 2 * CONGESTED_NS)  # messages starting then see only the congestion


def during(out, a: float, b: float) -> list:
    return [m for m in out if a <= m[0] < b]


def test_owd_moves_bytes_off_a_congested_path_and_back_when_it_clears():
    sim, out = run("owd", congested(), 64, 70)
    sends = [(t, n) for n, (t, i, _, _) in enumerate(sim.sends) if i == 1]
    gaps = [(t, n - m) for (_, m), (t, n) in pairwise(sends)]  # chunks since sub 1's previous
    hot = [(t, gap) for t, gap in gaps if JUMP_NS <= t < BACK_NS]
    assert sum(gap <= PROBE_EVERY for _, gap in hot) <= WINDOW_CHUNKS  # a few acks' worth, then...
    assert all(t < JUMP_NS + CONGESTED_NS + 10 * T_FAST for t, gap in hot if gap <= PROBE_EVERY)
    assert len(hot) >= 4 and all(gap > PROBE_EVERY for _, gap in hot[-4:])  # ...an idle probe now and then
    for _, _, placed in during(out, 0, JUMP_NS):
        assert shares(placed, 4) == [16, 16, 16, 16]
    for _, _, placed in during(out, *HOT):
        assert shares(placed, 4)[1] == 0  # probes carry no chunk of a message
        assert 1 not in placed[-16:]  # the message's tail never goes to the congested path
    # probed back slowly: the probes' delays bring its estimate down within ~15 ms, then an equal share
    assert during(out, BACK_NS + 15e6, float("inf"))
    for _, _, placed in during(out, BACK_NS + 15e6, float("inf")):
        assert shares(placed, 4) == [16, 16, 16, 16]


def test_owd_beats_least_outstanding_and_ecmp_while_a_path_is_congested():
    times = {}
    for scheduler in ("ecmp", "least-outstanding", "owd"):
        _, out = run(scheduler, congested(), 64, 70)
        # from the first congested acks on (ecmp's messages there take so long that only one starts)
        times[scheduler] = max(elapsed for _, elapsed, _ in during(out, JUMP_NS + CONGESTED_NS, HOT[1]))
    assert times["owd"] < times["least-outstanding"] < times["ecmp"]


def test_owd_message_does_not_wait_on_the_congested_path():
    _, out = run("owd", congested(), 64, 70)
    healthy = 64 * T_FAST / 3 + BASE_NS
    assert all(elapsed <= 2 * healthy for _, elapsed, _ in during(out, *HOT))


def test_owd_with_a_slow_subflow_beats_ecmp_and_matches_least_outstanding_without_the_tail():
    times, ends = {}, {}
    for scheduler in ("ecmp", "least-outstanding", "owd"):
        sim = Sim(scheduler, [Path(FAST), Path(FAST / 4)])
        for _ in range(4):  # learn the rates
            sim.message(64)
        times[scheduler], _, ends[scheduler] = sim.message(64)
    assert times["owd"] <= times["least-outstanding"] < times["ecmp"]
    ideal = 64 * CHUNK / (FAST + FAST / 4)
    assert times["owd"] <= 1.05 * ideal
    assert ends["owd"][1] - ends["owd"][0] <= T_FAST  # the slow subflow ends with the fast one...
    assert ends["least-outstanding"][1] - ends["least-outstanding"][0] >= 4 * T_FAST  # ...not a tail after it


# ---- 4. owd when there is nothing to fix -------------------------------------------------------
@pytest.mark.parametrize("n_subs", [2, 4])
def test_owd_splits_equal_subflows_evenly_at_no_cost(n_subs):
    _, out = run("owd", [Path() for _ in range(n_subs)], 64, 5)
    _, lo = run("least-outstanding", [Path() for _ in range(n_subs)], 64, 5)
    for (_, elapsed, placed), (_, lo_elapsed, _) in zip(out, lo):
        assert max(shares(placed, n_subs)) - min(shares(placed, n_subs)) <= 1
        assert elapsed <= lo_elapsed
        assert elapsed <= 64 * T_FAST / n_subs + 3 * BASE_NS


# ---- 5. SubflowState ---------------------------------------------------------------------------
def test_floor_and_excess_from_recorded_acks():
    s = SubflowState()
    assert s.on_send(CHUNK) == 0 and s.excess_ns == 0.0
    s.on_ack(CHUNK, 0, 20_000, 1.0)  # 1 byte/ns, 20 µs
    assert (s.rate, s.delay_ns, s.floor_ns, s.excess_ns, s.outstanding) == (1.0, 20_000, 20_000, 0.0, 0)
    s.on_send(CHUNK)
    s.on_ack(CHUNK, 0, 60_000, None)  # the path queues 40 µs: a quarter of it shows
    assert (s.delay_ns, s.floor_ns, s.excess_ns) == (30_000, 20_000, 10_000)
    s.on_send(CHUNK)
    s.on_ack(CHUNK, 0, 60_000, None)
    assert s.excess_ns == 17_500  # 0.75 * 30 µs + 0.25 * 60 µs - 20 µs
    s.on_send(CHUNK)
    s.on_ack(CHUNK, 0, 8_000, None)  # a new floor
    assert (s.floor_ns, s.delay_ns, s.excess_ns) == (8_000, 30_125, 22_125)
    assert s.finish_ns(CHUNK, 99.0) == 22_125 + CHUNK  # excess + the chunk at the measured 1 byte/ns


def test_wait_behind_earlier_bytes_is_not_path_queueing():
    s = SubflowState()
    assert [s.on_send(CHUNK) for _ in range(3)] == [0, CHUNK, 2 * CHUNK]
    s.rate, s.delay_ns, s.floor_ns, s.acks = 1.0, 20_000, 20_000, 1
    s.on_ack(CHUNK, CHUNK, 20_000 + CHUNK, None)  # waited a chunk's time on our own wire
    assert (s.delay_ns, s.excess_ns, s.outstanding) == (20_000, 0.0, 2 * CHUNK)
    s.on_ack(CHUNK, 2 * CHUNK, 20_000 + 2 * CHUNK + 40_000, None)  # two chunks ahead and 40 µs on the path
    assert s.excess_ns == 10_000


def test_floor_ages_out_after_floor_age_acks():
    s = SubflowState(chunks=2, rate=1.0)
    s.on_ack(0, 0, 10_000, None)  # a floor of 10 µs
    s.delay_ns = 30_000
    for _ in range(FLOOR_AGE):  # held for FLOOR_AGE acks above it
        s.on_ack(0, 0, 30_000, None)
        assert s.floor_ns == 10_000 and s.excess_ns == 20_000
    s.on_ack(0, 0, 30_000, None)  # then the floor is what the path shows now
    assert (s.floor_ns, s.excess_ns) == (30_000, 0.0)


def test_rate_is_an_ewma_of_the_delivery_rates():
    s = SubflowState(chunks=1)
    s.on_ack(0, 0, 0, None)
    assert s.rate == 0.0  # no measure (app-limited, or a probe): no sample
    rates = []
    for sample in (1.0, 2.0, 2.0, None):
        s.outstanding = CHUNK
        s.on_ack(CHUNK, 0, 1_000, sample)
        rates.append(s.rate)
    assert rates == [1.0, 1.0 + EWMA, 1.0 + EWMA + (1 - EWMA) * EWMA, 1.0 + EWMA + (1 - EWMA) * EWMA]


def test_first_ack_seeds_the_running_delay():
    s = SubflowState()
    s.on_send(CHUNK)
    s.on_send(CHUNK)
    s.on_ack(CHUNK, 0, 20_000, 1.0)
    assert s.delay_ns == 20_000


# ---- 6. the window -----------------------------------------------------------------------------
def test_a_slow_subflow_takes_smaller_chunks_and_holds_less():
    """A chunk is about CHUNK_NS at the subflow's rate, within [MIN_CHUNK, CHUNK]; the window is
    WINDOW_CHUNKS of them: a 3 Mbit/s subflow holds about 0.3 s of bytes, not 0.7 s."""
    assert SubflowState().chunk == CHUNK  # not measured yet
    assert SubflowState(rate=FAST).chunk == CHUNK
    slow = SubflowState(rate=3e6 / 8 / 1e9)  # 3 Mbit/s in bytes per ns
    assert MIN_CHUNK < slow.chunk < CHUNK and slow.chunk == int(slow.rate * CHUNK_NS)
    assert slow.window == WINDOW_CHUNKS * slow.chunk
    assert SubflowState(rate=1e-9).chunk == MIN_CHUNK


@pytest.mark.parametrize("scheduler", ["ecmp", "least-outstanding", "owd"])
def test_slow_subflows_are_sent_smaller_chunks_once_measured(scheduler):
    mbit = 1e6 / 8 / 1e9  # bytes per ns
    sim, _ = run(scheduler, [Path(3 * mbit), Path(1.5 * mbit)], 16, 2)
    for i, sub in enumerate(sim.subs):
        sizes = [b - a for _, j, a, b in sim.sends if j == i and b > a]
        assert sizes[:WINDOW_CHUNKS] == [CHUNK] * WINDOW_CHUNKS  # before its first ack, the rate unknown
        later = sizes[WINDOW_CHUNKS:]  # each placed after one of its acks: cut to sub.chunk, no piece under MIN_CHUNK
        assert len(later) > 1 and all(MIN_CHUNK <= n < sub.chunk + MIN_CHUNK for n in later), later
        assert sub.chunk < CHUNK - MIN_CHUNK


def test_take_cuts_a_chunk_to_the_subflows_size_and_leaves_no_rest_under_min_chunk():
    q = [(0, CHUNK), (CHUNK, 2 * CHUNK)]
    assert take(q, 30_000) == (0, 30_000) and q[0] == (30_000, CHUNK)  # rest 35536: kept queued
    assert take(q, 30_000) == (30_000, CHUNK)  # 35536 < 30000 + MIN_CHUNK: goes whole
    assert take(q, CHUNK) == (CHUNK, 2 * CHUNK) and q == []


def test_least_outstanding_takes_a_subflow_with_room_when_the_emptiest_is_full():
    """Windows differ with the subflows' rates: a full slow subflow must not hold a fast one back."""
    slow = SubflowState(rate=3e6 / 8 / 1e9)
    slow.outstanding = slow.window
    fast = SubflowState(outstanding=slow.window + 1, rate=FAST)
    assert least_outstanding([slow, fast], CHUNK, [8]) == 1


def test_pick_waits_when_the_chosen_subflow_is_full():
    full, empty = SubflowState(outstanding=WINDOW), SubflowState()
    assert least_outstanding([SubflowState(outstanding=WINDOW) for _ in range(3)], CHUNK, [8]) is None
    assert ecmp([full, empty], 0, [3, 0]) is None  # subflow 0's share: wait for it, not for 1
    assert ecmp([full, empty], 0, [3, 1]) == 1  # but 1 goes on with its own share meanwhile
    assert ecmp([SubflowState(), empty], 0, [3, 5]) == 1  # the share owed most first
    assert pick("ecmp", [full, empty], [[(0, CHUNK)], []]) is None
    fast, slow = SubflowState(outstanding=WINDOW, rate=100.0), SubflowState(rate=0.01)
    assert owd([fast, slow], CHUNK, [8]) is None  # still the first to deliver: wait, don't settle
    assert owd([SubflowState(outstanding=WINDOW - CHUNK, rate=100.0), slow], CHUNK, [8]) == 0


def test_pick_counts_idle_chunks_and_probes_an_idle_subflow():
    subs, queue = [SubflowState(rate=100.0), SubflowState(rate=0.01)], [[(0, CHUNK)]]
    for _ in range(PROBE_EVERY):
        assert probes("owd", subs) == []
        assert pick("owd", subs, queue) == 0
        subs[0].on_send(CHUNK)
        subs[0].outstanding = 0  # acked at once
    assert subs[1].idle == PROBE_EVERY
    assert probes("owd", subs) == [1] and probes("least-outstanding", subs) == []
    assert pick("owd", subs, queue) == 0  # the chunk still goes where it is delivered first
    assert subs[1].on_probe() == 0 and subs[1].idle == 0 and probes("owd", subs) == []
    subs[1].on_ack(0, 0, 40_000, None)  # the probe's ack: a delay, no bytes, no rate
    assert subs[1].delay_ns == 40_000 and subs[1].rate == 0.01 and subs[1].outstanding == 0
    subs[0].outstanding = WINDOW
    assert pick("owd", subs, queue) is None and subs[0].idle == 0  # a wait counts nothing


# ---- 7. copies of a slow subflow's last chunks ----------------------------------------------------
def test_spare_copies_the_chunk_a_slow_subflow_delivers_last():
    slow = SubflowState(outstanding=WINDOW, rate=FAST / 10)
    idle, busy = SubflowState(rate=FAST), SubflowState(outstanding=WINDOW - CHUNK, rate=FAST)
    last = (WINDOW, CHUNK)  # its last chunk is behind the whole window
    assert spare([slow, idle, busy], 1, [last, None, (WINDOW - CHUNK, CHUNK)]) == 0
    # the busy subflow would deliver a copy a window later, and a tenth-rate window is longer still
    assert spare([slow, idle, busy], 2, [last, None, None]) == 0
    # nothing left to copy, or a copy would not gain a chunk's time: no copy
    assert spare([slow, idle], 1, [None, None]) is None
    even = SubflowState(outstanding=CHUNK, rate=FAST)
    assert spare([even, idle], 1, [(CHUNK, CHUNK), None]) is None
    # a full subflow takes no copies, however slow the others
    assert spare([slow, SubflowState(outstanding=WINDOW, rate=FAST)], 1, [last, None]) is None


def test_spare_copies_only_what_it_would_deliver_a_window_sooner():
    idle = SubflowState(rate=FAST)
    level = SubflowState(outstanding=WINDOW, rate=FAST)  # its last chunk a window out, at j's own rate
    assert spare([level, idle], 1, [(WINDOW, CHUNK), None]) is None  # sooner, but not by a window
    half = SubflowState(outstanding=WINDOW, rate=FAST / 2)  # two windows' time out
    assert spare([half, idle], 1, [(WINDOW, CHUNK), None]) == 0


def test_spare_prefers_the_copy_that_gains_most():
    late = SubflowState(outstanding=WINDOW, rate=FAST / 10)
    later = SubflowState(outstanding=WINDOW, rate=FAST / 10, delay_ns=1_000_000, floor_ns=0.0)  # 1 ms queued
    idle = SubflowState(rate=FAST)
    assert spare([late, later, idle], 2, [(WINDOW, CHUNK)] * 2 + [None]) == 1
    # ...measured from that chunk, not the subflow's end: an early chunk of `later` gains less
    assert spare([late, later, idle], 2, [(WINDOW, CHUNK), (CHUNK, CHUNK), None]) == 0


# ---- 8. parked subflows (standbys) ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["ecmp", "least-outstanding", "owd"])
def test_a_parked_subflow_gets_no_chunk_and_no_probe(name):
    """The emptiest, fastest subflow, idle long enough to be probed, but parked: nothing goes to it."""
    subs = [SubflowState(outstanding=CHUNK, rate=FAST), SubflowState(rate=100 * FAST, parked=True)]
    subs[1].idle = 10 * PROBE_EVERY
    queues = plan(name, 8 * CHUNK, subs)
    placed = []
    while any(queues):
        i = pick(name, subs, queues)
        assert i is not None
        take(scheduler(name).queue(queues, i), subs[i].chunk)
        subs[i].outstanding = 0  # acked at once
        placed.append(i)
    assert set(placed) == {0} and probes(name, subs) == []
    assert spare(subs, 1, [(CHUNK, CHUNK), None]) is None  # nor copies of another's chunks


def test_ecmp_shares_a_message_among_the_subflows_at_work():
    subs = [SubflowState(), SubflowState(parked=True), SubflowState()]
    queues = plan("ecmp", 8 * CHUNK, subs)
    assert queues[1] == [] and queues[0][0] == (0, CHUNK) and queues[2][0] == (4 * CHUNK, 5 * CHUNK)
    assert sum(b - a for q in queues for a, b in q) == 8 * CHUNK
    subs[1].parked = False  # at work again: its share of the next message
    assert [len(q) for q in plan("ecmp", 9 * CHUNK, subs)] == [3, 3, 3]


def test_the_registry_names_every_scheduler_and_what_each_needs():
    assert SCHEDULERS.names() == ["ecmp", "least-outstanding", "owd"]
    assert {n: (scheduler(n).placement, scheduler(n).copies) for n in SCHEDULERS.names()} == {
        "ecmp": ("hashed", False), "least-outstanding": ("hashed", False), "owd": ("learned", True)}


def test_an_unknown_scheduler_is_one_line_listing_the_known_ones():
    with pytest.raises(ClockfabricError) as e:
        scheduler("fastest")
    assert str(e.value) == "no scheduler named 'fastest'; schedulers are ecmp, least-outstanding, owd"
