"""What a sender knows of each subflow, and how a message is cut into chunks for it.

The schedulers (schedulers/: ecmp, least-outstanding, owd) read this state to say which
subflow carries each chunk. The receiver acknowledges each chunk with its one-way delay, read
off synced clocks: the sender's send stamp to the first byte's arrival, so it includes the
wait behind the subflow's earlier bytes. With each ack the sender also reads the subflow's
rate: the kernel's own delivery-rate estimate for the connection (TCP_INFO), which counts
bytes as the peer's kernel acknowledges them (timings taken in Python, on either side, are
bent by when threads run and by chunks that sit whole in a socket before they are read).

A subflow may be parked (a standby, collective/standby.py): it gets no new chunk and no
probe, under any scheduler, until it is unparked.

Every scheduler holds about a window unacknowledged on a subflow (WINDOW_CHUNKS of its
chunks; the chunk placed last, or a copy from spare(), may top it), so a slow subflow never
hides a deep queue in its socket buffer. A chunk is about CHUNK_NS at its subflow's measured
rate, between MIN_CHUNK and CHUNK, so fast subflows keep CHUNK and Python's cost per byte.
On a 3 Mbit/s subflow (a spine uplink shared by 8) a window of whole 64 KiB chunks held
0.7 s of bytes, placed before any scheduler could place them better, and a message could
wait 0.17 s on its last chunk (docs/notes/2026-11-23-contention.md). take() cuts a chunk down for a slow
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

Range = tuple[int, int]  # a chunk's bytes of its message: [start, end)


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


def take(queue: list[Range], size: int) -> Range:
    """Pop the queue's next chunk for a subflow whose chunk is `size` bytes: cut down to it,
    its rest left at the head, unless that rest would fall under MIN_CHUNK."""
    a, b = queue.pop(0)
    if b - a >= size + MIN_CHUNK:
        queue.insert(0, (a + size, b))
        return a, a + size
    return a, b


def cut(a: int, b: int, pieces: int) -> list[Range]:
    """[a, b) in `pieces` near-equal ranges (none empty)."""
    edges = [a + e for e in bounds(b - a, pieces)] if pieces else [a]
    return [(x, y) for x, y in pairwise(edges) if y > x]
