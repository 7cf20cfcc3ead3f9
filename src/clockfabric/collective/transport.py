"""TCP subflows between ranks: our analogue of RDMA queue pairs, each pinned to a path.

Every pair of ranks that exchanges data shares `subflows` TCP connections. Subflow i uses
path slot i % len(slots): it connects to the peer's address in that slot, from this rank's
own address in that slot. With one NIC address per plane in the slots (the /31 that is
routed over that plane only), subflow i is pinned to a plane. On a single plane every
subflow has its own source port, which the switches' ECMP hash spreads over the spines.

A message to a peer is cut into `subflows` contiguous byte ranges, one per subflow, and
the receiver knows the sizes in advance, so nothing is framed. Each subflow has a sender
and a receiver thread doing blocking calls (sendall, recv_into with MSG_WAITALL): the
kernel moves the bytes and releases the GIL, and Python wakes once per large piece rather
than once per packet. Kernel timeouts (SO_RCVTIMEO / SO_SNDTIMEO) end any wait that makes
no progress, so a dead peer or path gives an error, never a hang.
"""

from __future__ import annotations

import errno
import queue
import socket
import struct
import threading
import time
from collections.abc import Iterable, Sequence

from clockfabric.collective.ring import Transfer, bounds
from clockfabric.errors import ClockfabricError

HELLO = struct.Struct("!4sIHH")  # magic, call token, rank, subflow index
MAGIC = b"CFar"
PIECE = 1 << 20  # bytes per syscall: how often a thread comes back to Python (progress, timeouts)
SNDBUF = 4 << 20  # big buffers so one syscall moves a lot; the kernel caps them at wmem_max
RETRY_S = 0.05  # between connection attempts to a peer that is not listening yet


class TransportError(ClockfabricError):
    """A peer or path failed: the message names the peer and what happened."""


class _Latch:
    """Counts a batch of transfers down; remembers the first failure and the last progress."""

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


class _Subflow:
    """One TCP connection to a peer, with a sender and a receiver thread working FIFO jobs."""

    def __init__(self, owner: Transport, sock: socket.socket, peer: int, index: int) -> None:
        self.owner, self.sock, self.peer, self.index = owner, sock, peer, index
        self.sends: queue.SimpleQueue = queue.SimpleQueue()
        self.recvs: queue.SimpleQueue = queue.SimpleQueue()
        for loop, jobs in ((self._send, self.sends), (self._recv, self.recvs)):
            threading.Thread(target=self._work, args=(loop, jobs), daemon=True,
                             name=f"subflow-{peer}.{index}").start()

    def _work(self, loop, jobs: queue.SimpleQueue) -> None:
        while (job := jobs.get()) is not None:
            view, latch = job
            try:
                loop(view, latch)
            except (OSError, ValueError) as e:  # ValueError: the socket was closed under us
                latch.finish(self.owner._failure(self.peer, self.index, e))
            else:
                latch.finish()

    def _send(self, view: memoryview, latch: _Latch) -> None:
        for off in range(0, len(view), PIECE):
            self.sock.sendall(view[off:off + PIECE])
            latch.progress()

    def _recv(self, view: memoryview, latch: _Latch) -> None:
        off = 0
        while off < len(view):
            want = min(PIECE, len(view) - off)
            got = self.sock.recv_into(view[off:off + want], want, socket.MSG_WAITALL)
            if got == 0:
                raise ConnectionResetError(errno.ECONNRESET, "the peer closed the connection")
            off += got
            latch.progress()


class Transport:
    """Links between this rank and its peers, `subflows` TCP connections per peer.

    addresses[r] lists rank r's address in each path slot (one per plane in use; all ranks
    the same number). Rank r listens on port_base + r. names[r] labels rank r in errors.
    token: a number both sides must present, so connections from another call are refused.
    """

    def __init__(self, rank: int, addresses: Sequence[Sequence[str]], *, port_base: int, subflows: int = 1,
                 timeout_s: float = 60.0, names: Sequence[str] | None = None, token: int = 0) -> None:
        if subflows < 1:
            raise ValueError("subflows must be at least 1")
        if len({len(a) for a in addresses}) != 1 or not addresses[0]:
            raise ValueError("every rank needs the same number of path slots (at least one)")
        self.rank, self.addresses, self.port_base = rank, [list(a) for a in addresses], port_base
        self.subflows, self.timeout_s, self.token = subflows, timeout_s, token
        self.names = list(names) if names else [f"rank {r}" for r in range(len(addresses))]
        self.links: dict[int, list[_Subflow]] = {}
        self.broken: TransportError | None = None
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
        """Open the subflows to every peer: this rank dials the higher ranks and accepts the lower."""
        peers = sorted(set(peers) - {self.rank})
        deadline = time.monotonic() + self.timeout_s
        socks: dict[int, list[socket.socket | None]] = {p: [None] * self.subflows for p in peers}
        try:
            for peer in (p for p in peers if p > self.rank):
                for i in range(self.subflows):
                    socks[peer][i] = self._dial(peer, i, deadline)
            self._accept({p for p in peers if p < self.rank}, socks, deadline)
        except BaseException:
            for s in (s for row in socks.values() for s in row if s is not None):
                s.close()
            raise
        for peer, row in socks.items():
            for s in row:
                self._tune(s)
            self.links[peer] = [_Subflow(self, s, peer, i) for i, s in enumerate(row)]

    def _slot(self, index: int) -> int:
        return index % len(self.addresses[self.rank])

    def _dial(self, peer: int, index: int, deadline: float) -> socket.socket:
        slot = self._slot(index)
        src, dst, port = self.addresses[self.rank][slot], self.addresses[peer][slot], self.port_base + peer
        what = f"cannot connect to {self.names[peer]} at {dst}:{port} from {src} (subflow {index}, path slot {slot})"
        last = "no answer"
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TransportError(f"{what}: {last} within {self.timeout_s:g} s")
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((src, 0))
                s.settimeout(left)
                s.connect((dst, port))
                s.sendall(HELLO.pack(MAGIC, self.token, self.rank, index))
                return s
            except TimeoutError:
                s.close()
                last = "no answer"
            except OSError as e:  # refused: not listening yet; unreachable: a path still coming up
                s.close()
                if e.errno == errno.EADDRNOTAVAIL:
                    raise TransportError(f"{what}: {src} is not an address of this host") from None
                last = e.strerror or str(e)
                time.sleep(min(RETRY_S, max(0.0, deadline - time.monotonic())))

    def _accept(self, lower: set[int], socks: dict[int, list[socket.socket | None]], deadline: float) -> None:
        missing = {(p, i) for p in lower for i in range(self.subflows)}
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
            socks[peer][index] = s

    def _tune(self, s: socket.socket) -> None:
        s.settimeout(None)  # blocking: each call waits in the kernel, bounded by the kernel timeouts
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
        tv = struct.pack("ll", int(self.timeout_s), int(self.timeout_s % 1 * 1e6))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)

    # ---- moving data ---------------------------------------------------------------------------
    def exchange(self, sends: Sequence[Transfer] = (), recvs: Sequence[Transfer] = ()) -> None:
        """Send and receive these messages concurrently, each cut over all subflows of its peer."""
        if self.broken:
            raise self.broken
        latch = _Latch()
        for transfers, side in ((sends, "sends"), (recvs, "recvs")):
            for peer, view in transfers:
                if peer not in self.links:
                    raise ValueError(f"rank {peer} is not connected to rank {self.rank}")
                cut = bounds(len(view), self.subflows)
                for sub, a, b in zip(self.links[peer], cut, cut[1:]):
                    if b > a:
                        latch.add()
                        getattr(sub, side).put((view[a:b], latch))
        try:
            latch.wait(self.timeout_s + 5, "exchange")
        except TransportError as e:
            self.broken = e
            raise

    def _failure(self, peer: int, index: int, e: Exception) -> TransportError:
        if isinstance(e, BlockingIOError) or getattr(e, "errno", None) == errno.EAGAIN:  # kernel timeout
            how = f"no progress for {self.timeout_s:g} s"
        else:
            how = getattr(e, "strerror", None) or str(e)
        slot = self._slot(index)
        return TransportError(f"link to {self.names[peer]} failed "
                              f"(subflow {index}, to {self.addresses[peer][slot]}): {how}")

    def close(self) -> None:
        """Close every subflow: peers still waiting see the connection end at once."""
        self.listener.close()
        for row in self.links.values():
            for sub in row:
                try:
                    sub.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sub.sock.close()
                sub.sends.put(None)
                sub.recvs.put(None)
        self.links.clear()

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
