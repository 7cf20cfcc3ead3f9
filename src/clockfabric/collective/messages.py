"""A batch of messages in flight and how a caller waits on it: what the sending and receiving
sides of the transport share."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from clockfabric.errors import ClockfabricError

if TYPE_CHECKING:
    from clockfabric.collective.transport import Transport


class TransportError(ClockfabricError):
    """A peer or path failed: the message names the peer and what happened."""


class Latch:
    """Counts a batch of messages down; remembers the first failure and the last progress."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.pending = 0
        self.error: Exception | None = None
        self.last = time.monotonic()

    def add(self) -> None:
        with self.cv:
            self.pending += 1

    def progress(self) -> None:
        self.last = time.monotonic()

    def finish(self, error: Exception | None = None) -> None:
        with self.cv:
            self.pending -= 1
            self.last = time.monotonic()
            if error is not None and self.error is None:
                self.error = error
            self.cv.notify_all()

    def wait(self, stall_s: float, what: str) -> None:
        with self.cv:
            while self.pending and self.error is None:
                self.cv.wait(1.0)
                if time.monotonic() - self.last > stall_s:  # a backstop: kernel timeouts come first
                    raise TransportError(f"{what}: no progress for {stall_s:g} s")
            if self.error is not None:
                raise self.error


class Message:
    """One message in flight, the seq-th posted to (or from) its peer: done when `left`
    (chunks to send, or bytes to receive) is 0. A receiver notes in `taken` the offsets of
    the chunks it has begun to read (a copy of one of them, arriving later, is read and dropped)."""

    def __init__(self, view: memoryview, left: int, latch: Latch, seq: int) -> None:
        self.view, self.left, self.latch, self.seq, self.done = view, left, latch, seq, False
        self.taken: set[int] = set()

    def settle(self, error: Exception | None = None) -> None:
        if not self.done:
            self.done = True
            self.latch.finish(error)


class Pending:
    """Messages posted by Transport.start: wait() returns once all are complete."""

    def __init__(self, transport: Transport, latch: Latch) -> None:
        self.transport, self.latch = transport, latch

    def wait(self) -> None:
        # the stall clock starts now: a receive posted steps ahead rightly has no bytes yet
        self.latch.progress()
        try:
            self.latch.wait(self.transport.timeout_s + 5, "exchange")
        except TransportError as e:
            self.transport.broken = e
            raise

