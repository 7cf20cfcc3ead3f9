"""Which subflow carries the next chunk: the schedulers, as pure functions of subflow state.

A message to a peer is cut into chunks; a chunk goes to one of the peer's subflows. The
receiver acknowledges each chunk with its one-way delay, read off synced clocks: the
sender's send stamp to the first byte's arrival, so it includes the wait behind the
subflow's earlier bytes. With each ack the sender also reads the subflow's rate: the
kernel's own delivery-rate estimate for the connection (TCP_INFO), which counts bytes as
the peer's kernel acknowledges them (timings taken in Python, on either side, are bent by
when threads run and by chunks that sit whole in a socket before they are read).

- `ecmp`: the baseline. Each subflow has a fixed, equal share of every message (contiguous
  ranges, as NCCL's channels); the path is whatever the switches' hash made of it. Shares
  go out side by side: no subflow waits for another's window.
- `least-outstanding`: HPN's scheduler, the strong baseline: the chunk goes to the subflow
  with the fewest bytes sent and not yet acknowledged.
- `owd`: ours. The chunk goes to the subflow expected to deliver it first: its network delay
  above the floor (queueing on the path, from the one-way delays) plus the time to drain
  what it already holds and the chunk at its measured rate. A subflow that is expected to
  finish later gets no bytes, so congested paths lose bytes as their delay rises, and a
  message's last chunks never wait on a slow path. A subflow left idle is sent a probe now
  and then (probes()): a header with no data, which the receiver acknowledges at once with
  its one-way delay, so a path is re-measured (probing back slowly) without any message
  waiting on it. Paired with learned source ports (one subflow per spine), it also decides
  *where* the subflows run. Once a message's last chunk is placed, a subflow left with
  nothing to carry takes a copy of the chunk another subflow is expected to deliver last,
  where it would deliver it sooner by more than a window's time (spare()): TCP cannot take
  back what a slow subflow holds, so the copy races it and the receiver keeps whichever
  arrives first.

A subflow may be parked (a standby, collective/standby.py): it gets no new chunk and no
probe, under any scheduler, until it is unparked; ecmp's shares are planned over the others
(a share already planned on a subflow parked since stays on it).

Every scheduler holds about a window unacknowledged on a subflow (WINDOW_CHUNKS of its
chunks; the chunk placed last, or a copy from spare(), may top it), so a slow subflow never
hides a deep queue in its socket buffer. A chunk is about CHUNK_NS at its subflow's measured
rate, between MIN_CHUNK and CHUNK, so fast subflows keep CHUNK and Python's cost per byte.
On a 3 Mbit/s subflow (a spine uplink shared by 8) a window of whole 64 KiB chunks held
0.7 s of bytes, placed before any scheduler could place them better, and a message could
wait 0.17 s on its last chunk (docs/benchmarks.md). take() cuts a chunk down for a slow
subflow and leaves no piece under MIN_CHUNK: a short last piece goes with the chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from clockfabric.collective.ring import bounds

CHUNK = 64 << 10  # bytes per chunk at most: small enough to balance, large enough to stay cheap in Python
MIN_CHUNK = 16 << 10  # bytes per chunk at least, however slow the subflow
CHUNK_NS = 80_000_000  # a chunk is about this long at its subflow's measured rate, within those bounds
WINDOW_CHUNKS = 4  # unacknowledged chunks per subflow
EWMA = 0.25  # weight of a new sample in the running estimates
PROBE_EVERY = 32  # an idle subflow is probed after this many chunks went elsewhere
FLOOR_AGE = 256  # chunks: the delay floor is the lowest seen over about this many acks

SCHEDULERS = ("ecmp", "least-outstanding", "owd")
PLACEMENTS = ("hashed", "learned")  # source ports: the kernel's (ECMP hashes them) or learned per spine


@dataclass
class SubflowState:
    """What a sender knows of one subflow; updated as chunks go out and acks come back."""

    outstanding: int = 0  # bytes handed to the subflow and not yet acknowledged
    sent: int = 0  # bytes ever handed to it
    chunks: int = 0
    rate: float = 0.0  # bytes per ns, the kernel's delivery rate (0: not measured yet)
    delay_ns: float = 0.0  # running one-way delay of a chunk's first byte, net of the wait behind earlier bytes
    floor_ns: float = float("inf")
    floor_seen: int = 0  # acks since the floor was last set
    acks: int = 0
    idle: int = 0  # chunks sent elsewhere since this one last got one (or a probe)
    parked: bool = False  # a standby: no new chunk or probe until it is unparked (what it holds drains)

    def on_send(self, length: int) -> int:
        """Count a chunk handed to this subflow; returns the bytes queued ahead of it."""
        ahead = self.outstanding
        self.outstanding += length
        self.sent += length
        self.chunks += 1
        self.idle = 0
        return ahead

    def on_probe(self) -> int:
        """Count a probe (no data) sent on this subflow; returns the bytes queued ahead of it."""
        self.idle = 0
        return self.outstanding

    def on_ack(self, length: int, ahead: int, delay_ns: int, rate: float | None) -> None:
        """An ack: the chunk took delay_ns to start arriving, with `ahead` bytes in front of it
        when it was sent (a probe: length 0, nothing ahead); rate: bytes per ns the connection
        delivers now, or None where there is no fresh measure."""
        self.outstanding -= length
        if rate:
            self.rate = rate if self.rate == 0 else (1 - EWMA) * self.rate + EWMA * rate
        # the wait behind the bytes ahead is the sender's own queue, not the path's
        net = delay_ns - (ahead / self.rate if self.rate else 0.0)
        self.delay_ns = net if self.acks == 0 else (1 - EWMA) * self.delay_ns + EWMA * net
        self.acks += 1
        self.floor_seen += 1
        if net < self.floor_ns or self.floor_seen > FLOOR_AGE:
            self.floor_ns, self.floor_seen = max(0.0, net), 0

    @property
    def excess_ns(self) -> float:
        """Queueing on the path: the running delay above the floor."""
        return 0.0 if self.floor_ns == float("inf") else max(0.0, self.delay_ns - self.floor_ns)

    @property
    def chunk(self) -> int:
        """Bytes for this subflow's next chunk: CHUNK_NS at its rate, CHUNK until it is measured."""
        return CHUNK if not self.rate else min(CHUNK, max(MIN_CHUNK, int(self.rate * CHUNK_NS)))

    @property
    def window(self) -> int:
        """Bytes this subflow may hold unacknowledged."""
        return WINDOW_CHUNKS * self.chunk

    def finish_ns(self, length: int, default_rate: float) -> float:
        """When a chunk of `length` sent now would be fully delivered, roughly (a subflow not
        measured yet is taken to run at default_rate)."""
        return self.excess_ns + (self.outstanding + length) / (self.rate or default_rate)


def plan(scheduler: str, size: int, subs: list[SubflowState]) -> list[list[tuple[int, int]]]:
    """A message's chunks as (start, end) byte ranges, in queues: for ecmp one queue per
    subflow (its fixed share; none for a parked one), for the others a single queue any
    subflow takes from."""
    active = [i for i, s in enumerate(subs) if not s.parked]
    if scheduler == "ecmp":
        queues: list[list[tuple[int, int]]] = [[] for _ in subs]
        for i, (a, b) in zip(active, pairwise(bounds(size, len(active)))):
            queues[i] = _cut(a, b, -(-(b - a) // CHUNK))
        return queues
    return [_cut(0, size, max(-(-size // CHUNK), min(len(active), size)))]


def take(queue: list[tuple[int, int]], size: int) -> tuple[int, int]:
    """Pop the queue's next chunk for a subflow whose chunk is `size` bytes: cut down to it,
    its rest left at the head, unless that rest would fall under MIN_CHUNK."""
    a, b = queue.pop(0)
    if b - a >= size + MIN_CHUNK:
        queue.insert(0, (a + size, b))
        return a, a + size
    return a, b


def _cut(a: int, b: int, pieces: int) -> list[tuple[int, int]]:
    edges = [a + e for e in bounds(b - a, pieces)] if pieces else [a]
    return [(x, y) for x, y in pairwise(edges) if y > x]


def ecmp(subs: list[SubflowState], length: int, owed: list[int]) -> int | None:
    """A subflow with chunks of its own share still owed and room in its window (the one
    owed most): shares are fixed, but no subflow waits for another's window."""
    ready = [i for i in range(len(subs)) if owed[i] and subs[i].outstanding < subs[i].window]
    return max(ready, key=lambda i: owed[i]) if ready else None


def least_outstanding(subs: list[SubflowState], length: int, owed: list[int]) -> int | None:
    """The subflow with the fewest bytes outstanding among those with room in their windows
    (windows differ: a slow subflow's is smaller)."""
    room = [j for j in range(len(subs)) if not subs[j].parked and subs[j].outstanding < subs[j].window]
    return min(room, key=lambda j: subs[j].outstanding) if room else None


def _default_rate(subs: list[SubflowState]) -> float:
    """The rate to assume for a subflow not measured yet: the mean of those measured."""
    rates = [s.rate for s in subs if s.rate > 0]
    return sum(rates) / len(rates) if rates else 1.0


def owd(subs: list[SubflowState], length: int, owed: list[int]) -> int | None:
    default = _default_rate(subs)
    i = min((j for j in range(len(subs)) if not subs[j].parked), key=lambda j: subs[j].finish_ns(min(length, subs[j].chunk), default))
    return i if subs[i].outstanding < subs[i].window else None  # the best is full: wait for it, don't settle


def spare(subs: list[SubflowState], j: int, lasts: list[tuple[int, int] | None]) -> int | None:
    """owd only, once every chunk of the messages at hand is placed: which subflow's chunk
    subflow j should carry a copy of, or None. lasts[i]: for subflow i, the last chunk it
    holds unacknowledged and not yet copied, as (bytes queued up to and including it, its
    length), or None. The copy goes where it gains most: where i is expected to deliver the
    chunk later than j would by more than j's time for a whole window. A copy costs a chunk
    of j's time and of capacity; with a margin of one chunk, copies taken between a pipelined
    ring's slices cost two all-reduces 6-9% (docs/benchmarks.md)."""
    if subs[j].parked or subs[j].outstanding >= subs[j].window:
        return None
    default = _default_rate(subs)
    best, most = None, 0.0
    for i, last in enumerate(lasts):
        if i == j or last is None:
            continue
        upto, length = last
        there = subs[i].excess_ns + upto / (subs[i].rate or default)
        gain = there - subs[j].finish_ns(length, default) - subs[j].window / (subs[j].rate or default)
        if gain > most:
            best, most = i, gain
    return best


PICK = {"ecmp": ecmp, "least-outstanding": least_outstanding, "owd": owd}


def probes(scheduler: str, subs: list[SubflowState]) -> list[int]:
    """Subflows to probe now (owd only): idle for PROBE_EVERY chunks, with nothing in flight."""
    if scheduler != "owd":
        return []
    return [j for j, s in enumerate(subs) if s.idle >= PROBE_EVERY and s.outstanding == 0 and not s.parked]


def pick(scheduler: str, subs: list[SubflowState], queues: list[list[tuple[int, int]]]) -> int | None:
    """The subflow for the next chunk of a message (queues: what plan() made of it, less what
    went out), or None: wait for an ack, then ask again. The caller takes the chunk from
    queues[i] for ecmp, from queues[0] otherwise, with take(queue, subs[i].chunk)."""
    owed = [len(q) for q in queues]
    length = 0 if scheduler == "ecmp" else queues[0][0][1] - queues[0][0][0]
    i = PICK[scheduler](subs, length, owed)
    if i is not None:
        for j, s in enumerate(subs):
            if j != i:
                s.idle += 1
    return i
