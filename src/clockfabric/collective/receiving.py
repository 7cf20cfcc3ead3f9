"""The receiving side of a peer's subflows to us (Inbound): a receiver thread per subflow puts
each chunk in place, whatever subflow brought it, and acknowledges it with its one-way delay."""

from __future__ import annotations

import errno
import socket
import threading
import time
from typing import TYPE_CHECKING

from clockfabric.collective.messages import Latch, Message
from clockfabric.collective.tcpinfo import MIN_RCVBUF, fixed_rcvbuf
from clockfabric.collective.wire import ACK, HEADER, PROBE, RESIZE, Idle, recv_into

if TYPE_CHECKING:
    from clockfabric.collective.transport import Transport


class Inbound:
    """The peer's subflows to us: a receiver thread per subflow puts each chunk in place
    and acknowledges it. The first copy of a chunk to arrive is kept; any other is dropped."""

    def __init__(self, owner: Transport, peer: int, socks: list[socket.socket]) -> None:
        self.owner, self.peer, self.socks = owner, peer, socks
        self.cv = threading.Condition()
        self.posted: dict[int, Message] = {}
        self.seq = 0
        self.failed: Exception | None = None
        self.heard = time.monotonic()  # when any of the peer's subflows last brought us something
        for i in range(len(socks)):
            threading.Thread(target=self._guard, args=(i,), daemon=True, name=f"recv-{peer}.{i}").start()

    def post(self, view: memoryview, latch: Latch) -> None:
        with self.cv:
            msg = Message(view, len(view), latch, self.seq)
            if self.failed:
                msg.settle(self.failed)
                return
            self.posted[self.seq] = msg
            self.seq += 1
            self.cv.notify_all()

    def _receive(self, i: int) -> None:
        sock, clock, head = self.socks[i], self.owner.clock, bytearray(HEADER.size)
        spill = bytearray()  # where a copy of a chunk already taken is read, to be dropped

        def idle() -> bool:  # nothing owed, or owed and arriving on the peer's other subflows
            return not self.posted or time.monotonic() - self.heard < self.owner.timeout_s

        while True:
            try:
                recv_into(sock, memoryview(head), idle)
            except Idle:
                continue
            first = clock()
            self.heard = time.monotonic()
            seq, off, length, stamp = HEADER.unpack(head)
            if seq == PROBE:
                sock.sendall(ACK.pack(seq, 0, first - stamp))
                continue
            if seq == RESIZE:
                fixed_rcvbuf(sock, max(MIN_RCVBUF, off))
                continue
            with self.cv:
                deadline = time.monotonic() + self.owner.timeout_s
                while seq >= self.seq:  # the sender is a step ahead of us
                    if self.failed or time.monotonic() > deadline:
                        raise TimeoutError(errno.ETIMEDOUT, "message never posted")
                    self.cv.wait(0.5)
                msg = self.posted.get(seq)  # None: complete, so this chunk is a copy that lost the race
                if msg is not None and off + length > len(msg.view):
                    raise ValueError(f"chunk {off}+{length} overruns a {len(msg.view)}-byte message")
                fresh = msg is not None and off not in msg.taken
                if msg is not None and fresh:
                    msg.taken.add(off)
            if msg is None or not fresh:
                if len(spill) < length:
                    spill = bytearray(length)
                recv_into(sock, memoryview(spill)[:length], lambda: False)
            else:
                recv_into(sock, msg.view[off:off + length], lambda: False, msg.latch.progress)
                with self.cv:
                    msg.left -= length
                    if msg.left == 0:
                        self.posted.pop(seq, None)  # gone already where another subflow failed
                        msg.settle()
            # acked only once counted: the sender closes after its last ack, and that close must
            # find nothing here still owed
            sock.sendall(ACK.pack(seq, length, first - stamp))

    def _guard(self, i: int) -> None:
        try:
            self._receive(i)
        except (OSError, ValueError) as e:
            if self.owner.closing:
                return
            with self.cv:
                self.failed = self.failed or self.owner.failure(self.peer, i, e)
                for msg in self.posted.values():
                    msg.settle(self.failed)
                self.posted.clear()
                self.cv.notify_all()

