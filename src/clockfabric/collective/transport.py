"""TCP subflows between ranks: our analogue of RDMA queue pairs, each pinned to a path.

A subflow is one TCP connection and carries data one way: the sender dials it, so the
sender picks its source port and, through the switches' ECMP hash, its spine. Every rank
dials `subflows` connections to each peer it talks to and accepts as many from it. Subflow
i uses path slot i % len(slots): it connects from this rank's own address in that slot to
the peer's (one NIC address per plane, the /31 that only that plane routes), so it is
pinned to a plane by addressing alone; `source_ports` may pin it to a spine as well.

A message is cut into chunks; the scheduler (schedulers/) says which subflow carries each,
and the chunk is cut again to that subflow's size (smaller on a slow one). A chunk travels
behind a header (message number, offset, length, send stamp on the synced clock), so the
receiver puts it in place whatever subflow brought it, and answers on the same connection's
idle direction with an ack: the chunk's one-way delay. The sender may also ask, in-band, for
a new receive buffer on a subflow (resize), so its window can follow what the ports on its
path are shared among. Acks drive the schedulers and let no subflow hold more than a window
of unacknowledged bytes.

    wire.py       the hello, chunk header and ack on the wire
    tcpinfo.py    what the kernel knows of a connection; the socket options we set
    messages.py   messages in flight, the latch a batch of them counts down, Pending
    sending.py    Outbound: our subflows to a peer (dispatch, send, acks, copies)
    receiving.py  Inbound: a peer's subflows to us (reassembly, acks)
    transport.py  Transport: connecting, posting messages, stats, closing

Each subflow has a sender and an ack thread on the sending side, a receiver thread on the
other, all making blocking calls in large pieces, so the kernel moves the bytes with the
GIL released. Kernel timeouts (SO_RCVTIMEO / SO_SNDTIMEO) end any wait that makes no
progress, so a dead peer or path gives an error, never a hang. A subflow that hears nothing
while the same peer's bytes arrive on another is quiet, not dead: the scheduler may leave it
idle (a parked standby, for a whole job); its sender sees a dead path by the acks it is owed.
"""

from __future__ import annotations

import errno
import socket
import struct
import time
from collections.abc import Callable, Iterable, Sequence

from clockfabric.collective.messages import Latch, Pending, TransportError
from clockfabric.collective.receiving import Inbound
from clockfabric.collective.ring import Transfer
from clockfabric.collective.schedulers import scheduler as make_scheduler
from clockfabric.collective.sending import Chunk, Outbound
from clockfabric.collective.tcpinfo import (
    MIN_RCVBUF,
    TcpCounters,
    congestion,
    fixed_rcvbuf,
    prefer_congestion,
    tcp_counters,
)
from clockfabric.collective.wire import HELLO, MAGIC, recv_exactly

__all__ = ["MIN_RCVBUF", "Pending", "TcpCounters", "Transport", "TransportError"]

SNDBUF = 4 << 20  # the kernel caps it at wmem_max
RETRY_S = 0.05  # between connection attempts to a peer that is not listening yet


class Transport:
    """Links between this rank and its peers, `subflows` TCP connections each way per peer.

    addresses[r] lists rank r's address in each path slot (one per plane in use; all ranks
    the same number). Rank r listens on port_base + r. names[r] labels rank r in errors.
    token: a number both sides must present, so connections from another call are refused.
    scheduler: a name in schedulers.SCHEDULERS. rcvbuf: see below; CollectiveOptions checks
    both where a job is launched. source_ports(peer, i): the source port for our subflow i
    to peer (a learned path), or None to let the kernel pick (the ECMP hash decides).
    clock: the synced clock, ns, that stamps chunks (the system clock: in the lab every host
    shares it; on real hosts it is what the agent keeps in sync).
    parked: subflow indices dialled to every peer but parked (SubflowState.parked): standbys,
    which carry nothing until unpark()ed.
    rcvbuf: each subflow's receive window here, bytes, fixed (fixed_rcvbuf), or None for the
    kernel's autotuning. Autotuning grows a subflow's window with its round trip, so behind a
    deep FIFO it grows until the FIFO overflows; a fixed window bounds what the sender may have
    in flight.
    """

    def __init__(self, rank: int, addresses: Sequence[Sequence[str]], *, port_base: int, subflows: int = 1,
                 timeout_s: float = 60.0, names: Sequence[str] | None = None, token: int = 0,
                 scheduler: str = "ecmp", source_ports: Callable[[int, int], int | None] | None = None,
                 clock: Callable[[], int] = time.time_ns, rcvbuf: int | None = None,
                 parked: Iterable[int] = ()) -> None:
        if subflows < 1:
            raise ValueError("subflows must be at least 1")
        if len({len(a) for a in addresses}) != 1 or not addresses[0]:
            raise ValueError("every rank needs the same number of path slots (at least one)")
        self.parked = frozenset(parked)
        if not set(range(subflows)) - self.parked:
            raise ValueError("at least one subflow must not be parked")
        self.rank, self.addresses, self.port_base = rank, [list(a) for a in addresses], port_base
        self.subflows, self.timeout_s, self.token = subflows, timeout_s, token
        self.scheduler = make_scheduler(scheduler)
        self.source_ports, self.clock, self.rcvbuf = source_ports, clock, rcvbuf
        self.names = list(names) if names else [f"rank {r}" for r in range(len(addresses))]
        self.outbound: dict[int, Outbound] = {}
        self.inbound: dict[int, Inbound] = {}
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
            dialed, accepted = _filled(out[peer]), _filled(into[peer])
            for s in dialed + accepted:
                self._tune(s)
            if self.rcvbuf:
                for s in accepted:
                    fixed_rcvbuf(s, self.rcvbuf)
            self.outbound[peer] = Outbound(self, peer, dialed)
            self.inbound[peer] = Inbound(self, peer, accepted)

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
                prefer_congestion(s)  # the dialer sends the data: its choice rules the flow
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
                magic, token, peer, index = HELLO.unpack(recv_exactly(s, HELLO.size))
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
        latch = Latch()
        for transfers, links in ((recvs, self.inbound), (sends, self.outbound)):
            for peer, view in transfers:
                if peer not in links:
                    raise ValueError(f"rank {peer} is not connected to rank {self.rank}")
                if len(view):  # both sides skip empty messages, so message numbers agree
                    latch.add()
                    links[peer].post(view, latch)
        return Pending(self, latch)

    def resize(self, peer: int, index: int, size: int) -> None:
        """Ask the peer to hold a `size`-byte receive window (fixed_rcvbuf) for our subflow
        `index` to it (at least MIN_RCVBUF), once the chunks already queued on it are written:
        its window follows."""
        if out := self.outbound.get(peer):  # None once closed
            size = self.resized[(peer, index)] = max(MIN_RCVBUF, size)
            out.chunks[index].put(Chunk.resize(size))

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
        held by the congestion window, segments resent, and of those the ones the receiver
        already had (spurious)."""
        rows = []
        for peer, out in sorted(self.outbound.items()):
            for i, (s, st) in enumerate(zip(out.socks, out.states, strict=True)):
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
                             "cwnd_limited_s": round(tcp.cwnd_limited_us / 1e6, 3), "retrans": tcp.retrans,
                             "spurious": tcp.spurious})
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


def _filled(row: list[socket.socket | None]) -> list[socket.socket]:
    """A peer's sockets, every one dialed or accepted by now (connect raised otherwise)."""
    socks = [s for s in row if s is not None]
    assert len(socks) == len(row)
    return socks
