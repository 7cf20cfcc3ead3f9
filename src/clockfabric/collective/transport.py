"""TCP subflows between ranks: our analogue of RDMA queue pairs, each pinned to a path.

A subflow is one TCP connection and carries data one way: the sender dials it, so the
sender picks its source port and, through the switches' ECMP hash, its spine. Every rank
dials `subflows` connections to each peer it talks to and accepts as many from it. Subflow
i uses path slot i % len(slots): it connects from this rank's own address in that slot to
the peer's (one NIC address per plane, the /31 that only that plane routes), so it is
pinned to a plane by addressing alone; `source_ports` may pin it to a spine as well.

A message is cut into chunks; the scheduler (schedule.py) says which subflow carries each,
and the chunk is cut again to that subflow's size (smaller on a slow one).
A chunk travels behind a header (message number, offset, length, send stamp on the synced
clock), so the receiver puts it in place whatever subflow brought it, and answers on the
same connection's idle direction with an ack: the chunk's one-way delay. The sender may also
ask, in-band, for a new receive buffer on a subflow (resize), so its window can follow what
the ports on its path are shared among.
Acks drive the schedulers and let no subflow hold more than a window of unacknowledged
bytes. Under `owd` a subflow with nothing left to carry may also send a copy of a chunk a
slower subflow still holds (schedule.spare): the receiver keeps the first copy of each
chunk to arrive and reads any later one into a spill buffer, so no byte lands twice.

Each subflow has a sender and an ack thread on the sending side, a receiver thread on the
other, all making blocking calls in large pieces, so the kernel moves the bytes with the
GIL released. Kernel timeouts (SO_RCVTIMEO / SO_SNDTIMEO) end any wait that makes no
progress, so a dead peer or path gives an error, never a hang. A subflow that hears nothing
while the same peer's bytes arrive on another is quiet, not dead: the scheduler may leave it
idle (a parked standby, for a whole job); its sender sees a dead path by the acks it is owed.
"""

from __future__ import annotations

import errno
import queue
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import astuple, dataclass

from clockfabric.collective.ring import Transfer
from clockfabric.collective.schedule import SCHEDULERS, SubflowState, pick, plan, probes, spare, take
from clockfabric.errors import ClockfabricError

HELLO = struct.Struct("!4sIHH")  # magic, call token, rank, subflow index
MAGIC = b"CFa2"
HEADER = struct.Struct("!IQIq")  # message number, offset, length, send stamp (ns, synced clock)
PROBE = 0xFFFFFFFF  # the message number of a probe: a header alone, acknowledged at once
RESIZE = 0xFFFFFFFE  # a header alone asking the receiver for a receive buffer of `offset` bytes; not acknowledged
ACK = struct.Struct("!IIq")  # message number, length, one-way delay of the first byte (ns)
TCP_INFO_LEN = 168  # struct tcp_info up to tcpi_delivery_rate (Linux 4.9+)
TCP_CHRONO_LEN = 192  # ... and on to the chrono stats: busy, rwnd- and sndbuf-limited time (Linux 4.10+)
PIECE = 1 << 20  # bytes per syscall at most
SNDBUF = 4 << 20  # the kernel caps it at wmem_max
# Loss-based CUBIC, Linux's own default, where the kernel lets us choose: lab namespaces inherit
# the machine's default, and BBR there left some flows at 0.2-0.6 of a shaped link's rate where
# CUBIC holds 0.89-0.93 (docs/benchmarks.md). Without CAP_NET_ADMIN the kernel's default stays.
CONGESTION = b"cubic"
MIN_RCVBUF = 4096  # a receive buffer under a few segments would stall on delayed acks
RETRY_S = 0.05  # between connection attempts to a peer that is not listening yet
CLOSED_GRACE_S = 2.0  # a peer closed: how long our sender may take to count what it had already written


class TransportError(ClockfabricError):
    """A peer or path failed: the message names the peer and what happened."""


class _Idle(Exception):
    """A kernel timeout with nothing owed: not a failure, just quiet."""


class _PeerClosed(ConnectionResetError):
    """The peer closed its end cleanly (end of stream), as it does once it has all it expected."""


class _Latch:
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


class _Message:
    """One message in flight: done when `left` (chunks to send, or bytes to receive) is 0.
    A receiver notes in `taken` the offsets of the chunks it has begun to read (a copy of
    one of them, arriving later, is read and dropped)."""

    def __init__(self, view: memoryview, left: int, latch: _Latch) -> None:
        self.view, self.left, self.latch, self.done = view, left, latch, False
        self.taken: set[int] = set()

    def settle(self, error: Exception | None = None) -> None:
        if not self.done:
            self.done = True
            self.latch.finish(error)


class _Unacked:
    """A chunk (or probe) sent on a subflow and not yet acknowledged. `body` holds its bytes
    once they are written, where another subflow may carry them too (owd; None: not to be
    copied, not written yet, or copied already): a view of the message's buffer while the
    message is sending, a copy once it is done (the buffer is then the caller's again), so
    bytes are copied only for chunks still unacknowledged at the end of their message, at
    most a window per subflow. (The ring rewrites a segment it sent while that send may still
    be completing here, but only once the peer has the whole message, which then drops any
    copy.) A copy of a chunk not yet written could complete the peer's message, and the peer
    close, before the original is written."""

    __slots__ = ("ahead", "seq", "a", "b", "body")

    def __init__(self, ahead: int, seq: int, a: int, b: int) -> None:
        self.ahead, self.seq, self.a, self.b = ahead, seq, a, b
        self.body: memoryview | bytes | None = None


def _tcp_info(sock: socket.socket, length: int) -> bytes | None:
    """The first `length` bytes of the connection's struct tcp_info; None where the kernel
    gives fewer (too old) or none (closed)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, length)
    except OSError:
        return None
    return info if len(info) >= length else None


def delivery_rate(sock: socket.socket) -> float | None:
    """The kernel's delivery-rate estimate for a TCP connection, bytes per ns; None while it
    is app-limited (it then measures our sending, not the path) or unknown."""
    info = _tcp_info(sock, TCP_INFO_LEN)
    if info is None or info[7] & 1:  # tcpi_delivery_rate_app_limited
        return None
    return struct.unpack_from("Q", info, 160)[0] / 1e9 or None  # tcpi_delivery_rate, bytes/s


@dataclass(frozen=True)
class TcpCounters:
    """A connection's sending, as the kernel counts it since it opened: time (µs) with data
    in flight (busy), and the part of it that the receive window or the send buffer held
    back; the rest the congestion window held. retrans: segments sent again."""

    busy_us: int = 0
    rwnd_limited_us: int = 0
    sndbuf_limited_us: int = 0
    retrans: int = 0

    def __add__(self, other: TcpCounters) -> TcpCounters:
        return TcpCounters(*(a + b for a, b in zip(astuple(self), astuple(other))))

    def __sub__(self, other: TcpCounters) -> TcpCounters:
        return TcpCounters(*(a - b for a, b in zip(astuple(self), astuple(other))))

    @property
    def cwnd_limited_us(self) -> int:
        return max(0, self.busy_us - self.rwnd_limited_us - self.sndbuf_limited_us)


def tcp_counters(sock: socket.socket) -> TcpCounters | None:
    """The kernel's counters for a TCP connection; None where it keeps none (closed, too old a kernel)."""
    info = _tcp_info(sock, TCP_CHRONO_LEN)
    if info is None:
        return None
    busy, rwnd, sndbuf = struct.unpack_from("QQQ", info, 168)
    return TcpCounters(busy, rwnd, sndbuf, struct.unpack_from("I", info, 100)[0])  # tcpi_total_retrans


def fixed_rcvbuf(sock: socket.socket, size: int) -> None:
    """Fix the connection's receive buffer at `size` bytes: autotuning stops, and the window it
    advertises stays within the buffer. The kernel doubles the size and counts packets' whole
    memory against it, so on a 1500-byte MTU the window settles near 1.3x `size` (a lab
    subflow read 41984 bytes at 32 KiB). TCP_WINDOW_CLAMP would not hold: Linux resets the
    clamp from the buffer whenever its payload-to-memory ratio moves."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)


def _prefer_congestion(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, CONGESTION)
    except OSError:  # not built in, or not permitted here: the kernel's default it is
        pass


def congestion(sock: socket.socket) -> str:
    """The congestion control a connection runs."""
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode()
    except OSError:
        return ""


def _recv_into(sock: socket.socket, view: memoryview, idle_ok: Callable[[], bool], progress=None) -> None:
    """Fill view from sock. A kernel timeout before the first byte raises _Idle if idle_ok()."""
    off = 0
    while off < len(view):
        want = min(PIECE, len(view) - off)
        try:
            got = sock.recv_into(view[off:off + want], want, socket.MSG_WAITALL)
        except BlockingIOError:
            if off == 0 and idle_ok():
                raise _Idle from None
            raise
        if got == 0:
            raise _PeerClosed(errno.ECONNRESET, "the peer closed the connection")
        off += got
        if progress:
            progress()


class _Outbound:
    """Our subflows to one peer: a dispatcher cuts messages into chunks and the scheduler
    places each; per subflow a sender thread writes them and an ack thread reads the acks."""

    def __init__(self, owner: Transport, peer: int, socks: list[socket.socket]) -> None:
        self.owner, self.peer, self.socks = owner, peer, socks
        self.states = [SubflowState(parked=i in owner.parked) for i in range(len(socks))]
        self.cv = threading.Condition()
        self.failed: Exception | None = None
        self.active: set[_Message] = set()
        self.seq = 0
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.chunks = [queue.SimpleQueue() for _ in socks]
        self.unacked: list[deque[_Unacked]] = [deque() for _ in socks]
        self.placing = False  # the dispatcher has chunks of a message still to place
        threading.Thread(target=self._dispatch, daemon=True, name=f"dispatch-{peer}").start()
        for i in range(len(socks)):
            threading.Thread(target=self._guard, args=(i, self._send), daemon=True, name=f"send-{peer}.{i}").start()
            threading.Thread(target=self._guard, args=(i, self._acks), daemon=True, name=f"acks-{peer}.{i}").start()

    def post(self, view: memoryview, latch: _Latch) -> None:
        with self.cv:
            msg = _Message(view, 0, latch)
            if self.failed:
                msg.settle(self.failed)
                return
            self.jobs.put((self.seq, msg))
            self.seq += 1

    def _dispatch(self) -> None:
        scheduler, n_subs = self.owner.scheduler, len(self.socks)
        copies = scheduler == "owd"  # only ours races a slow subflow's last chunks (spare())
        while (job := self.jobs.get()) is not None:
            seq, msg = job
            with self.cv:
                queues = plan(scheduler, len(msg.view), self.states)
            with self.cv:
                if self.failed:
                    msg.settle(self.failed)
                    continue
                msg.left = sum(len(q) for q in queues)
                self.active.add(msg)
                self.placing = True
            while any(queues):
                with self.cv:
                    for j in probes(scheduler, self.states):
                        self.unacked[j].append(_Unacked(self.states[j].on_probe(), PROBE, 0, 0))
                        self.chunks[j].put((PROBE, 0, 0, b"", None, None))
                    while (i := pick(scheduler, self.states, queues)) is None and not self.failed:
                        self.cv.wait(1.0)
                    if self.failed:
                        break
                    q = queues[i if scheduler == "ecmp" else 0]
                    queued = len(q)
                    a, b = take(q, self.states[i].chunk)  # a slow subflow takes a smaller chunk
                    msg.left += len(q) - queued + 1  # a cut one leaves its rest queued: a chunk more
                    sent = _Unacked(self.states[i].on_send(b - a), seq, a, b)
                    self.unacked[i].append(sent)
                self.chunks[i].put((seq, a, b, msg.view[a:b], msg, sent if copies else None))
            with self.cv:
                self.placing = not self.jobs.empty()
                if copies and not self.placing:
                    for j in range(n_subs):
                        self._spare(j)

    def _spare(self, j: int) -> None:
        """With nothing new to place, let subflow j carry copies of the chunks other subflows
        are expected to deliver last, while it would deliver them a window's time sooner
        (schedule.spare). Called with self.cv held."""
        while not self.failed:
            lasts: list[tuple[int, int] | None] = []
            for held in self.unacked:
                upto = sum(u.b - u.a for u in held)
                last = None
                for u in reversed(held):
                    if u.body is not None:
                        last = (upto, u.b - u.a)
                        break
                    upto -= u.b - u.a
                lasts.append(last)
            if (i := spare(self.states, j, lasts)) is None:
                return
            u = next(u for u in reversed(self.unacked[i]) if u.body is not None)
            data, u.body = bytes(u.body), None  # a view is copied now; a copy already made is kept
            self.unacked[j].append(_Unacked(self.states[j].on_send(u.b - u.a), u.seq, u.a, u.b))
            self.chunks[j].put((u.seq, u.a, u.b, data, None, None))

    def _send(self, i: int) -> None:
        sock, clock = self.socks[i], self.owner.clock
        while (job := self.chunks[i].get()) is not None:
            seq, a, b, body, msg, sent = job  # msg None: a probe, a resize, or a copy of a chunk sent elsewhere
            try:
                sock.sendall(HEADER.pack(seq, a, b - a, clock()))
                for off in range(0, b - a, PIECE):
                    sock.sendall(body[off:off + PIECE])
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
                if sent is not None:
                    sent.body = body
                msg.left -= 1
                if msg.left == 0:
                    if sent is not None:
                        self._keep_copies(seq)
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
                _recv_into(sock, memoryview(buf), lambda: state.outstanding == 0)
            except _Idle:
                continue
            except _PeerClosed:
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
                if self.owner.scheduler == "owd" and not self.placing:
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


class _Inbound:
    """The peer's subflows to us: a receiver thread per subflow puts each chunk in place
    and acknowledges it. The first copy of a chunk to arrive is kept; any other is dropped."""

    def __init__(self, owner: Transport, peer: int, socks: list[socket.socket]) -> None:
        self.owner, self.peer, self.socks = owner, peer, socks
        self.cv = threading.Condition()
        self.posted: dict[int, _Message] = {}
        self.seq = 0
        self.failed: Exception | None = None
        self.heard = time.monotonic()  # when any of the peer's subflows last brought us something
        for i in range(len(socks)):
            threading.Thread(target=self._guard, args=(i,), daemon=True, name=f"recv-{peer}.{i}").start()

    def post(self, view: memoryview, latch: _Latch) -> None:
        with self.cv:
            msg = _Message(view, len(view), latch)
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
                _recv_into(sock, memoryview(head), idle)
            except _Idle:
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
                if fresh:
                    msg.taken.add(off)
            if not fresh:
                if len(spill) < length:
                    spill = bytearray(length)
                _recv_into(sock, memoryview(spill)[:length], lambda: False)
            else:
                _recv_into(sock, msg.view[off:off + length], lambda: False, msg.latch.progress)
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


class Pending:
    """Messages posted by Transport.start: wait() returns once all are complete."""

    def __init__(self, transport: Transport, latch: _Latch) -> None:
        self.transport, self.latch = transport, latch

    def wait(self) -> None:
        # the stall clock starts now: a receive posted steps ahead rightly has no bytes yet
        self.latch.progress()
        try:
            self.latch.wait(self.transport.timeout_s + 5, "exchange")
        except TransportError as e:
            self.transport.broken = e
            raise


class Transport:
    """Links between this rank and its peers, `subflows` TCP connections each way per peer.

    addresses[r] lists rank r's address in each path slot (one per plane in use; all ranks
    the same number). Rank r listens on port_base + r. names[r] labels rank r in errors.
    token: a number both sides must present, so connections from another call are refused.
    scheduler: one of SCHEDULERS. source_ports(peer, i): the source port for our subflow i
    to peer (a learned path), or None to let the kernel pick (the ECMP hash decides).
    clock: the synced clock, ns, that stamps chunks (the system clock: in the lab every host
    shares it; on real hosts it is what the agent keeps in sync).
    parked: subflow indices dialled to every peer but parked (SubflowState.parked): standbys,
    which carry nothing until unpark()ed.
    rcvbuf: each subflow's receive buffer here, bytes, fixed (fixed_rcvbuf), or None for the
    kernel's autotuning. Autotuning grows a subflow's window with its round trip, so behind a
    deep FIFO it grows until the FIFO overflows; a fixed buffer bounds what the sender may have
    in flight.
    """

    def __init__(self, rank: int, addresses: Sequence[Sequence[str]], *, port_base: int, subflows: int = 1,
                 timeout_s: float = 60.0, names: Sequence[str] | None = None, token: int = 0,
                 scheduler: str = "ecmp", source_ports: Callable[[int, int], int | None] | None = None,
                 clock: Callable[[], int] = time.time_ns, rcvbuf: int | None = None,
                 parked: Iterable[int] = ()) -> None:
        if subflows < 1:
            raise ValueError("subflows must be at least 1")
        if rcvbuf is not None and rcvbuf < MIN_RCVBUF:
            raise ValueError(f"rcvbuf must be at least {MIN_RCVBUF} bytes; got {rcvbuf}")
        if len({len(a) for a in addresses}) != 1 or not addresses[0]:
            raise ValueError("every rank needs the same number of path slots (at least one)")
        self.parked = frozenset(parked)
        if not set(range(subflows)) - self.parked:
            raise ValueError("at least one subflow must not be parked")
        if scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {', '.join(SCHEDULERS)}; got {scheduler!r}")
        self.rank, self.addresses, self.port_base = rank, [list(a) for a in addresses], port_base
        self.subflows, self.timeout_s, self.token = subflows, timeout_s, token
        self.scheduler, self.source_ports, self.clock, self.rcvbuf = scheduler, source_ports, clock, rcvbuf
        self.names = list(names) if names else [f"rank {r}" for r in range(len(addresses))]
        self.outbound: dict[int, _Outbound] = {}
        self.inbound: dict[int, _Inbound] = {}
        self.pinned: dict[int, list[bool]] = {}  # per peer, per subflow: did it get its chosen source port
        self.resized: dict[tuple[int, int], int] = {}  # (peer, subflow) -> the receive buffer last asked of the peer
        self.broken: TransportError | None = None
        self.closing = False
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind(("", port_base + rank))
        except OSError as e:
            self.listener.close()
            raise TransportError(f"cannot listen on port {port_base + rank}: {e.strerror}") from None
        self.listener.listen(1024)

    # ---- connecting ----------------------------------------------------------------------------
    def connect(self, peers: Iterable[int]) -> None:
        """Dial our subflows to every peer and accept theirs to us."""
        peers = sorted(set(peers) - {self.rank})
        deadline = time.monotonic() + self.timeout_s
        out: dict[int, list[socket.socket | None]] = {p: [None] * self.subflows for p in peers}
        into: dict[int, list[socket.socket | None]] = {p: [None] * self.subflows for p in peers}
        try:
            for peer in peers:
                self.pinned[peer] = []
                for i in range(self.subflows):
                    out[peer][i] = self._dial(peer, i, deadline)
            self._accept(into, deadline)
        except BaseException:
            for s in (s for socks in (out, into) for row in socks.values() for s in row if s is not None):
                s.close()
            raise
        for peer in peers:
            for s in out[peer] + into[peer]:
                self._tune(s)
            if self.rcvbuf:
                for s in into[peer]:
                    fixed_rcvbuf(s, self.rcvbuf)
            self.outbound[peer] = _Outbound(self, peer, out[peer])
            self.inbound[peer] = _Inbound(self, peer, into[peer])

    def _slot(self, index: int) -> int:
        return index % len(self.addresses[self.rank])

    def _dial(self, peer: int, index: int, deadline: float) -> socket.socket:
        slot = self._slot(index)
        src, dst, port = self.addresses[self.rank][slot], self.addresses[peer][slot], self.port_base + peer
        sport = self.source_ports(peer, index) if self.source_ports else None
        what = f"cannot connect to {self.names[peer]} at {dst}:{port} from {src} (subflow {index}, path slot {slot})"
        last = "no answer"
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TransportError(f"{what}: {last} within {self.timeout_s:g} s")
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                _prefer_congestion(s)  # the dialer sends the data: its choice rules the flow
                pinned = self._bind(s, src, sport)
                s.settimeout(left)
                s.connect((dst, port))
                s.sendall(HELLO.pack(MAGIC, self.token, self.rank, index))
                self.pinned[peer].append(pinned)
                return s
            except TimeoutError:
                s.close()
                last = "no answer"
            except OSError as e:  # refused: not listening yet; unreachable: a path still coming up
                s.close()
                if e.errno == errno.EADDRNOTAVAIL and sport is None:
                    raise TransportError(f"{what}: {src} is not an address of this host") from None
                if e.errno == errno.EADDRNOTAVAIL:  # the learned port's 4-tuple is still taken
                    sport = None
                last = e.strerror or str(e)
                time.sleep(min(RETRY_S, max(0.0, deadline - time.monotonic())))

    @staticmethod
    def _bind(s: socket.socket, src: str, sport: int | None) -> bool:
        """Bind to the learned source port if it is free (else let the kernel pick): pinned?"""
        if sport is not None:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is fine
            try:
                s.bind((src, sport))
                return True
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
        s.bind((src, 0))
        return False

    def _accept(self, into: dict[int, list[socket.socket | None]], deadline: float) -> None:
        missing = {(p, i) for p in into for i in range(self.subflows)}
        self.listener.settimeout(0.2)
        while missing:
            if time.monotonic() > deadline:
                who = sorted({self.names[p] for p, _ in missing})
                raise TransportError(f"no connection from {', '.join(who)} "
                                     f"within {self.timeout_s:g} s ({len(missing)} subflows missing)")
            try:
                s, _ = self.listener.accept()
            except TimeoutError:
                continue
            s.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                magic, token, peer, index = HELLO.unpack(_recv_exactly(s, HELLO.size))
            except (OSError, struct.error):
                s.close()
                continue
            if magic != MAGIC or token != self.token or (peer, index) not in missing:
                s.close()  # another call's, or a stranger's
                continue
            missing.discard((peer, index))
            into[peer][index] = s

    def _tune(self, s: socket.socket) -> None:
        s.settimeout(None)  # blocking: each call waits in the kernel, bounded by the kernel timeouts
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
        tv = struct.pack("ll", int(self.timeout_s), int(self.timeout_s % 1 * 1e6))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)

    # ---- moving data ---------------------------------------------------------------------------
    def exchange(self, sends: Sequence[Transfer] = (), recvs: Sequence[Transfer] = ()) -> None:
        """Send and receive these messages concurrently; return when all are complete."""
        self.start(sends, recvs).wait()

    def start(self, sends: Sequence[Transfer] = (), recvs: Sequence[Transfer] = ()) -> Pending:
        """Post these messages and return at once; wait() on the result until all are complete.
        Messages to or from a peer go in the order posted, whatever call posted them.
        Receives are posted first, so a peer's early chunks find their place. A buffer sent
        stays ours until wait() returns, or until the peer has the whole message (the ring
        may rewrite it then: the copies of its chunks still to come are dropped there)."""
        if self.broken:
            raise self.broken
        latch = _Latch()
        for transfers, links in ((recvs, self.inbound), (sends, self.outbound)):
            for peer, view in transfers:
                if peer not in links:
                    raise ValueError(f"rank {peer} is not connected to rank {self.rank}")
                if len(view):  # both sides skip empty messages, so message numbers agree
                    latch.add()
                    links[peer].post(view, latch)
        return Pending(self, latch)

    def resize(self, peer: int, index: int, size: int) -> None:
        """Ask the peer to hold `size` bytes of receive buffer (fixed_rcvbuf) for our subflow
        `index` to it (at least MIN_RCVBUF), once the chunks already queued on it are written:
        its window follows."""
        if out := self.outbound.get(peer):  # None once closed
            size = self.resized[(peer, index)] = max(MIN_RCVBUF, size)
            out.chunks[index].put((RESIZE, size, size, b"", None, None))

    def park(self, peer: int, index: int, parked: bool = True) -> None:
        """Park our subflow `index` to the peer (no new chunks; what it holds drains) or put it
        back to work. One subflow to each peer always stays at work."""
        if out := self.outbound.get(peer):  # None once closed
            with out.cv:
                states = out.states
                if parked and all(s.parked for j, s in enumerate(states) if j != index):
                    raise ValueError(f"subflow {index} is the last at work to {self.names[peer]}")
                states[index].parked = parked
                out.cv.notify_all()

    def counters(self, peer: int, index: int) -> TcpCounters | None:
        """The kernel's counters for our subflow `index` to the peer (tcp_counters); None once closed."""
        out = self.outbound.get(peer)
        return tcp_counters(out.socks[index]) if out else None

    def failure(self, peer: int, index: int, e: Exception) -> TransportError:
        if isinstance(e, BlockingIOError) or getattr(e, "errno", None) in (errno.EAGAIN, errno.ETIMEDOUT):
            how = f"no progress for {self.timeout_s:g} s"
        else:
            how = getattr(e, "strerror", None) or str(e)
        slot = self._slot(index)
        return TransportError(f"link to {self.names[peer]} failed "
                              f"(subflow {index}, to {self.addresses[peer][slot]}): {how}")

    def stats(self) -> list[dict]:
        """Per peer and subflow: where it runs, what the scheduler gave it, the receive buffer the
        peer holds for it (peer_rcvbuf: last asked by resize, else the fixed one; None: autotuned),
        whether it is parked, and the kernel's counters (tcp_counters): seconds busy, of which
        held by the congestion window, and segments resent."""
        rows = []
        for peer, out in sorted(self.outbound.items()):
            for i, (s, st) in enumerate(zip(out.socks, out.states)):
                try:
                    sport = s.getsockname()[1]
                except OSError:
                    sport = None
                tcp = tcp_counters(s) or TcpCounters()
                rows.append({"peer": self.names[peer], "peer_rank": peer, "subflow": i, "source_port": sport,
                             "congestion": congestion(s),
                             "pinned": self.pinned.get(peer, [])[i:i + 1] == [True], "bytes": st.sent,
                             "peer_rcvbuf": self.resized.get((peer, i), self.rcvbuf),
                             "parked": st.parked, "chunks": st.chunks, "rate_mbps": round(st.rate * 8e3, 2),
                             "excess_us": round(st.excess_ns / 1e3, 1), "busy_s": round(tcp.busy_us / 1e6, 3),
                             "cwnd_limited_s": round(tcp.cwnd_limited_us / 1e6, 3), "retrans": tcp.retrans})
        return rows

    def close(self) -> None:
        """Close every subflow, once the peers have acknowledged every chunk sent (a message
        is complete here when its bytes are in the kernel; closing earlier could reset the
        connection under the peer's last reads). Peers still waiting see the end at once."""
        if not self.broken:
            deadline = time.monotonic() + self.timeout_s  # as long as any wait: a busy peer is not a dead one
            for out in self.outbound.values():
                with out.cv:
                    while (not out.failed and any(st.outstanding for st in out.states)
                           and time.monotonic() < deadline):
                        out.cv.wait(0.05)
        self.closing = True
        self.listener.close()
        for side in (self.outbound, self.inbound):
            for link in side.values():
                for s in link.socks:
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    s.close()
        for out in self.outbound.values():
            out.close()
        self.outbound.clear()
        self.inbound.clear()

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionResetError(errno.ECONNRESET, "closed during hello")
        data += chunk
    return data
