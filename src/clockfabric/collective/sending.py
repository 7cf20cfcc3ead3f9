"""The sending side of our subflows to one peer (Outbound): a dispatcher cuts each message into
chunks and the scheduler places each; per subflow a sender thread writes them and an ack
thread reads the acks, which drive the scheduler and bound what a subflow holds.

A scheduler whose `copies` is set (owd) may also have a subflow with nothing left to carry
send a copy of a chunk a slower subflow still holds (Scheduler.spare): the receiver keeps the
first copy of each chunk to arrive, so no byte lands twice.
"""

from __future__ import annotations

import queue
import socket
import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clockfabric.collective.messages import Latch, Message
from clockfabric.collective.schedule import SubflowState, take
from clockfabric.collective.tcpinfo import delivery_rate
from clockfabric.collective.wire import ACK, HEADER, PIECE, PROBE, RESIZE, Idle, PeerClosed, recv_into

if TYPE_CHECKING:
    from clockfabric.collective.transport import Transport

CLOSED_GRACE_S = 2.0  # a peer closed: how long our sender may take to count what it had already written


class Unacked:
    """A chunk (or probe) sent on a subflow and not yet acknowledged. `body` holds its bytes
    once they are written, where another subflow may carry them too (owd; None: not to be
    copied, not written yet, or copied already): a view of the message's buffer while the
    message is sending, a copy once it is done (the buffer is then the caller's again), so
    bytes are copied only for chunks still unacknowledged at the end of their message, at
    most a window per subflow. (The ring rewrites a segment it sent while that send may still
    be completing here, but only once the peer has the whole message, which then drops any
    copy.) A copy of a chunk not yet written could complete the peer's message, and the peer
    close, before the original is written."""

    __slots__ = ("ahead", "seq", "start", "end", "body")

    def __init__(self, ahead: int, seq: int, start: int, end: int) -> None:
        self.ahead, self.seq, self.start, self.end = ahead, seq, start, end
        self.body: memoryview | bytes | None = None

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Chunk:
    """What a subflow's sender thread is to write: a header (message number `seq`, offset
    `start`, length end - start) and `body`. `message`: the message it completes a part of
    (None: a probe, a resize, or a copy of a chunk sent elsewhere, which no message waits on);
    `unacked`: its record, to be given the body once written (only where copies are raced)."""

    seq: int
    start: int
    end: int
    body: memoryview | bytes = b""
    message: Message | None = None
    unacked: Unacked | None = None

    @classmethod
    def probe(cls) -> Chunk:
        """A header alone, which the receiver acknowledges at once with its one-way delay."""
        return cls(PROBE, 0, 0)

    @classmethod
    def resize(cls, size: int) -> Chunk:
        """A header alone asking the receiver for a receive buffer of `size` bytes."""
        return cls(RESIZE, size, size)


class Outbound:
    """Our subflows to one peer."""

    def __init__(self, owner: Transport, peer: int, socks: list[socket.socket]) -> None:
        self.owner, self.peer, self.socks = owner, peer, socks
        self.scheduler = owner.scheduler
        self.states = [SubflowState(parked=i in owner.parked) for i in range(len(socks))]
        self.cv = threading.Condition()
        self.failed: Exception | None = None
        self.active: set[Message] = set()
        self.seq = 0
        self.jobs: queue.SimpleQueue[Message | None] = queue.SimpleQueue()
        self.chunks: list[queue.SimpleQueue[Chunk | None]] = [queue.SimpleQueue() for _ in socks]
        self.unacked: list[deque[Unacked]] = [deque() for _ in socks]
        self.placing = False  # the dispatcher has chunks of a message still to place
        threading.Thread(target=self._dispatch, daemon=True, name=f"dispatch-{peer}").start()
        for i in range(len(socks)):
            threading.Thread(target=self._guard, args=(i, self._send), daemon=True, name=f"send-{peer}.{i}").start()
            threading.Thread(target=self._guard, args=(i, self._acks), daemon=True, name=f"acks-{peer}.{i}").start()

    def post(self, view: memoryview, latch: Latch) -> None:
        with self.cv:
            msg = Message(view, 0, latch, self.seq)
            if self.failed:
                msg.settle(self.failed)
                return
            self.jobs.put(msg)
            self.seq += 1

    def _dispatch(self) -> None:
        scheduler = self.scheduler
        while (msg := self.jobs.get()) is not None:
            with self.cv:
                queues = scheduler.plan(len(msg.view), self.states)
                if self.failed:
                    msg.settle(self.failed)
                    continue
                msg.left = sum(len(q) for q in queues)
                self.active.add(msg)
                self.placing = True
            while any(queues):
                with self.cv:
                    for j in scheduler.probes(self.states):
                        self.unacked[j].append(Unacked(self.states[j].on_probe(), PROBE, 0, 0))
                        self.chunks[j].put(Chunk.probe())
                    while (i := scheduler.pick(self.states, queues)) is None and not self.failed:
                        self.cv.wait(1.0)
                    if self.failed or i is None:  # None only once failed
                        break
                    q = scheduler.queue(queues, i)
                    queued = len(q)
                    a, b = take(q, self.states[i].chunk)  # a slow subflow takes a smaller chunk
                    msg.left += len(q) - queued + 1  # a cut one leaves its rest queued: a chunk more
                    sent = Unacked(self.states[i].on_send(b - a), msg.seq, a, b)
                    self.unacked[i].append(sent)
                self.chunks[i].put(Chunk(msg.seq, a, b, msg.view[a:b], msg, sent if scheduler.copies else None))
            with self.cv:
                self.placing = not self.jobs.empty()
                if scheduler.copies and not self.placing:
                    for j in range(len(self.socks)):
                        self._spare(j)

    def _spare(self, j: int) -> None:
        """With nothing new to place, let subflow j carry copies of the chunks other subflows
        are expected to deliver last, while it would deliver them a window's time sooner
        (Scheduler.spare). Called with self.cv held."""
        while not self.failed:
            lasts: list[tuple[int, int] | None] = []
            for held in self.unacked:
                upto = sum(u.length for u in held)
                last = None
                for u in reversed(held):
                    if u.body is not None:
                        last = (upto, u.length)
                        break
                    upto -= u.length
                lasts.append(last)
            if (i := self.scheduler.spare(self.states, j, lasts)) is None:
                return
            u = next(u for u in reversed(self.unacked[i]) if u.body is not None)
            assert u.body is not None
            data, u.body = bytes(u.body), None  # a view is copied now; a copy already made is kept
            self.unacked[j].append(Unacked(self.states[j].on_send(u.length), u.seq, u.start, u.end))
            self.chunks[j].put(Chunk(u.seq, u.start, u.end, data))

    def _send(self, i: int) -> None:
        sock, clock = self.socks[i], self.owner.clock
        while (chunk := self.chunks[i].get()) is not None:
            msg, length = chunk.message, chunk.end - chunk.start
            try:
                sock.sendall(HEADER.pack(chunk.seq, chunk.start, length, clock()))
                for off in range(0, length, PIECE):
                    sock.sendall(chunk.body[off:off + PIECE])
                    if msg is not None:
                        msg.latch.progress()
            except OSError:
                if msg is None:
                    # a probe, resize or copy, which no message waits on: the peer may rightly have closed,
                    # with every chunk it expected; a peer really gone shows on the acks, within their grace
                    continue
                raise
            if msg is None:
                continue
            with self.cv:
                if chunk.unacked is not None:
                    chunk.unacked.body = chunk.body
                msg.left -= 1
                if msg.left == 0:
                    if chunk.unacked is not None:
                        self._keep_copies(msg.seq)
                    self.active.discard(msg)
                    msg.settle()
                    self.cv.notify_all()

    def _keep_copies(self, seq: int) -> None:
        """Message `seq` is sent, and its buffer the caller's again: copy the bytes of its
        chunks still unacknowledged, which spare() may yet send again. Called with self.cv held."""
        for held in self.unacked:
            for u in held:
                if u.seq == seq and isinstance(u.body, memoryview):
                    u.body = bytes(u.body)

    def _acks(self, i: int) -> None:
        sock, state, buf = self.socks[i], self.states[i], bytearray(ACK.size)
        while True:
            try:
                recv_into(sock, memoryview(buf), lambda: state.outstanding == 0)
            except Idle:
                continue
            except PeerClosed:
                # a peer closes once it has every byte it expected, and may do so before our
                # sender thread, preempted after its last write, has counted it: give that
                # thread a moment; whatever is still unsent then has failed (and so will later posts)
                with self.cv:
                    self.cv.wait_for(lambda: not self.active or self.failed, CLOSED_GRACE_S)
                raise
            _, length, delay_ns = ACK.unpack(buf)
            rate = delivery_rate(sock) if length else None
            with self.cv:
                state.on_ack(length, self.unacked[i].popleft().ahead, delay_ns, rate)
                if self.scheduler.copies and not self.placing:
                    self._spare(i)
                self.cv.notify_all()

    def _guard(self, i: int, loop) -> None:
        try:
            loop(i)
        except (OSError, ValueError, IndexError) as e:  # ValueError: closed under us; IndexError: a stray ack
            self.fail(self.owner.failure(self.peer, i, e))

    def fail(self, error: Exception) -> None:
        if self.owner.closing:
            return
        with self.cv:
            self.failed = self.failed or error
            for msg in self.active:
                msg.settle(self.failed)
            self.active.clear()
            self.cv.notify_all()

    def close(self) -> None:
        self.jobs.put(None)
        for q in self.chunks:
            q.put(None)
