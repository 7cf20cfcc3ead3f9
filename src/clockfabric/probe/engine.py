"""The prober and reflector: one thread, kernel timestamps on every packet.

A path is a rail (the NIC a socket is bound to) and a UDP port: switches hash the ports
onto an ECMP path, so probing a peer on several ports spreads the probes over several
paths. Each exchange is a coded pair out and a coded pair back; once the reflector's
send timestamps arrive (on its next reply) the exchange is complete and is queued for
the clock estimator: eight timestamps, four in each host's own clock.

Each path has two sockets. The reflector's (port base + k) wakes the thread, so probes
are answered at once, as any NTP or PTP server would; the prober's (port base + ports + k)
is read once a tick, because the kernel has timestamped everything in it already. A
wake-up costs more than reading a few packets, so this keeps the agent's CPU low.

Every probe and reply carries a DSCP (default EF, 46): a fabric that maps it to a
strict-priority queue lets probes pass the bulk queues a job builds, so the delays they see
stay the fabric's, not the jobs' (topology/classes.py; docs/clock.md). On such a fabric a second,
sparser stream (`Marking.class_dscp`) marks its probes with the jobs' class instead, on the same paths:
their delays are the jobs' queues, which root cause wants and the clock must never see
(Exchange.dscp tells them apart).

Every datagram is sealed with the fleet key (auth/seal.py; docs/security.md): one that is not
the fleet's, or is a replay, is counted and dropped before it is read; a reply must echo the
nonce of the probe it answers. Nothing a datagram holds raises out of the loop.
"""

from __future__ import annotations

import heapq
import logging
import random
import select
import socket
import struct
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from clockfabric.auth.seal import PROBE, Rejected, Sealer
from clockfabric.netdev import bind_to_rail
from clockfabric.probe import timestamping, wire
from clockfabric.topology.classes import PRIORITY_DSCP

log = logging.getLogger(__name__)
TICK_S = 0.25  # the engine wakes this often to read what arrived and send what is due: wake-ups cost
PENDING_TIMEOUT_S = 5.0  # an exchange whose reply never came is forgotten after this
REFLECTED_TIMEOUT_S = 60.0  # a prober's run we have not heard from for this long is forgotten
MAX_REFLECTED = 4096  # prober runs remembered at most: the oldest goes first
RECV_BYTES = 128  # more than any probe datagram: a longer one arrives cut, and fails its MAC


@dataclass(frozen=True)
class Exchange:
    """One complete probe exchange with a peer on one path."""

    peer: str
    path: str
    tx: tuple[int, int]  # our sends of the probe pair (our clock)
    peer_rx: tuple[int, int]  # the peer's receives of it (peer's clock)
    peer_tx: tuple[int, int]  # the peer's sends of its reply pair (peer's clock)
    rx: tuple[int, int]  # our receives of the reply pair (our clock)
    dscp: int | None = None  # the class stream's probe (None: the clock's, in the priority class)


def path_label(rail: str | None, port: int) -> str:
    """A path's name: its rail and the reflector's port."""
    return f"{rail or 'any'}:{port}"


@dataclass(frozen=True)
class Marking:
    """What the probes mark: the clock's DSCP; the class stream's (None: no class stream) and the
    seconds between its exchanges with each peer."""

    dscp: int = PRIORITY_DSCP
    class_dscp: int | None = None
    class_interval_s: float = 1.0


@dataclass
class _Socket:
    name: str  # the path: rail and the reflector's port
    sock: socket.socket
    port: int  # the reflector's port of this path, where probes go
    fd: int
    rail: str | None = None  # the NIC it is bound to (None: any)
    sends: int = 0  # the kernel numbers our datagrams: this is the next one's id


class ProbeEngine(threading.Thread):
    def __init__(self, address: str, hosts: dict[str, str], probed: list[str], *, rails: Sequence[str | None],
                 ports: int = 4,
                 base_port: int = 7300, interval_s: float = 0.2, gap_ns: int = 10_000,
                 local_ns: Callable[[int], int] = lambda t: t, seed: int | None = None,
                 marking: Marking = Marking(), sealer: Sealer | None = None):
        super().__init__(name="probe-engine", daemon=True)
        self.address = address
        self.peers = {p: hosts[p] for p in probed}  # whom we probe
        self.names = {a: n for n, a in hosts.items()}  # the only addresses we answer or trust
        self.interval_s = interval_s
        self.gap_ns = gap_ns
        self.local_ns = local_ns  # kernel real time -> this host's clock
        self.tos = marking.dscp << 2  # the IP TOS byte: DSCP in its upper six bits, ECN (unused) below
        self.marking = marking
        self.sealer = sealer or Sealer(PROBE, address, None)
        self.session = random.getrandbits(32)
        self.rng = random.Random(seed)
        self.exchanges: deque[Exchange] = deque(maxlen=100_000)
        self.counters: Counter[str] = Counter()
        self._stopping = threading.Event()
        self._last_expiry = 0.0
        self._paths = [self._open(rail, base_port + ports + k, base_port + k) for rail in rails for k in range(ports)]
        self._reflectors = [self._open(rail, base_port + k, base_port + k) for rail in rails for k in range(ports)]
        self._by_fd = {p.fd: p for p in self._paths + self._reflectors}
        self._tx_ids: dict[tuple[int, int], tuple] = {}  # (socket fd, send id) -> what was sent
        self._pending: dict[tuple[str, int], dict] = {}  # (peer, seq) -> timestamps so far
        self._reflected: dict[tuple[str, int], dict] = {}  # (prober address, session) -> our last reply
        self._seq: dict[str, int] = {p: 0 for p in probed}
        self._next_path: dict[tuple[str, int | None], int] = {
            (p, d): self.rng.randrange(len(self._paths)) for p in probed
            for d in (None, marking.class_dscp)}
        self.paths = [p.name for p in self._paths]
        # what the fabric hashes a path by: (label, rail, our source port, the peer's port), to trace it
        self.flows = [(path_label(rail, base_port + k), rail, base_port + ports + k, base_port + k)
                      for rail in rails for k in range(ports)]

    def _open(self, rail: str | None, port: int, path_port: int) -> _Socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            if rail:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, rail.encode())
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, self.tos)
            s.bind((self.address, port))
        except OSError:
            s.close()
            raise
        s.setblocking(False)
        timestamping.enable(s)
        return _Socket(path_label(rail, path_port), s, path_port, s.fileno(), rail)

    def rebind(self) -> None:
        """Every socket bound again to its rail where the rail is another device now
        (netdev.bind_to_rail); called when a link of this host changes, from the link watcher's thread."""
        moved = {p.rail for p in self._paths + self._reflectors if p.rail and bind_to_rail(p.sock, p.rail)}
        if moved:
            log.info("probe sockets bound again to %s: a new device under the same name", ", ".join(sorted(moved)))

    # ---- the loop ---------------------------------------------------------------------------
    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        wake, tick = select.epoll(), select.epoll()
        for r in self._reflectors:
            wake.register(r.fd, select.EPOLLIN)
        for p in self._paths:
            tick.register(p.fd, select.EPOLLIN)  # send timestamps raise EPOLLERR
        next_tick = time.monotonic()
        streams: list[tuple[int | None, Callable[[], float]]] = [(None, lambda: self.interval_s)]
        if self.marking.class_dscp is not None:
            streams.append((self.marking.class_dscp, lambda: self.marking.class_interval_s))
        due = [(next_tick + self.rng.uniform(0, every()), peer, k) for peer in self.peers
               for k, (_, every) in enumerate(streams)]
        heapq.heapify(due)
        interval = self.interval_s
        try:
            while not self._stopping.is_set():
                for fd, events in wake.poll(max(0.0, next_tick - time.monotonic())):
                    self._drain(self._by_fd[fd], events)  # our replies' send timestamps follow
                now = time.monotonic()
                if now < next_tick:
                    continue
                next_tick = max(next_tick + TICK_S, now)
                for fd, events in tick.poll(0):
                    self._drain(self._by_fd[fd], events)
                if self.interval_s < interval:  # hurried: no peer waits out the slower rate it was due at
                    due = [(min(at, now + self.rng.uniform(0, self.interval_s)) if k == 0 else at, peer, k)
                           for at, peer, k in due]
                    heapq.heapify(due)
                interval = self.interval_s
                while due and due[0][0] <= now:
                    _, peer, k = heapq.heappop(due)
                    dscp, every = streams[k]
                    self._probe(peer, dscp)
                    jitter = self.rng.uniform(0.8, 1.2)  # no lockstep between hosts
                    heapq.heappush(due, (now + every() * jitter, peer, k))
                self._expire(now)
        finally:
            wake.close()
            tick.close()
            for p in self._paths + self._reflectors:
                p.sock.close()

    def _drain(self, sock: _Socket, events: int) -> None:
        """Read only the queues that have something (an empty read is a wasted syscall): data,
        then the error queue, where the send timestamps of what we just sent are waiting."""
        if events & select.EPOLLIN:
            self._drain_data(sock)
        if not self._drain_errors(sock) and events & select.EPOLLERR:
            sock.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)  # a pending socket error: clear it
            self.counters["socket_errors"] += 1

    def _drain_errors(self, sock: _Socket) -> int:
        """Send timestamps off the error queue; how many messages there were."""
        read = 0
        while True:
            try:
                _, anc, _, _ = sock.sock.recvmsg(0, timestamping.ANC_SIZE, socket.MSG_ERRQUEUE)
            except BlockingIOError:
                return read
            read += 1
            if (stamp := timestamping.tx_timestamp(anc)) is not None:
                self._sent(sock, *stamp)

    def _drain_data(self, sock: _Socket) -> None:
        while True:
            try:
                data, anc, _, (src, sport) = sock.sock.recvmsg(RECV_BYTES, timestamping.ANC_SIZE)
            except BlockingIOError:
                return
            except OSError as e:  # e.g. ICMP unreachable queued by the kernel
                self.counters["socket_errors"] += 1
                log.debug("recv on %s: %s", sock.name, e)
                continue
            try:
                self._received(sock, data, anc, src, sport)
            except Exception:  # a bug, not the packet's fault: the thread must live to probe on
                self.counters["handler_errors"] += 1
                log.exception("probe datagram from %s on %s", src, sock.name)

    # ---- sending ----------------------------------------------------------------------------
    def _send_pair(self, path: _Socket, first: wire.Packet, second: wire.Packet, dest: tuple[str, int],
                   what: tuple, echo: int = 0, dscp: int | None = None) -> int:
        """A warm-up, then two datagrams gap_ns apart: if the gap survives the trip, neither met a queue.
        The warm-up asks for no send timestamp (nor takes a timestamp id): one read less. A `dscp`
        marks these three alone (a control message on the send), the socket's own stays.
        Returns the nonce of the second (what a reply to the pair echoes)."""
        marked = [] if dscp is None else [(socket.IPPROTO_IP, socket.IP_TOS, struct.pack("i", dscp << 2))]
        seal = self.sealer.seal
        warmup, _ = seal(wire.encode(wire.Packet(wire.WARMUP, first.session, first.seq)), dest[0], echo)
        one, _ = seal(wire.encode(first), dest[0], echo)
        two, nonce = seal(wire.encode(second), dest[0], echo)
        timed = [one, two]
        datagrams = [warmup, *timed]
        sent = 0
        try:
            path.sock.sendmsg([warmup], timestamping.NO_TX_TIMESTAMP + marked, 0, dest)
            sent = 1
            for data in timed:
                if sent == 2:
                    until = time.perf_counter_ns() + self.gap_ns
                    while time.perf_counter_ns() < until:
                        pass
                if marked:
                    path.sock.sendmsg([data], marked, 0, dest)
                else:
                    path.sock.sendto(data, dest)
                sent += 1
        except OSError as e:  # no route (a failed link), a full buffer: this exchange is lost
            self.counters["send_errors"] += 1
            log.debug("send on %s to %s: %s", path.name, dest, e)
        stamped = max(0, sent - 1)
        for i in range(stamped):
            self._tx_ids[(path.fd, path.sends + i)] = (*what, i)
        path.sends += stamped
        self.counters["wire_bytes_sent"] += sum(len(d) + wire.IP_UDP_ETH_OVERHEAD for d in datagrams[:sent])
        return nonce

    def _probe(self, peer: str, dscp: int | None = None) -> None:
        """One exchange with `peer`, each stream cycling over the paths on its own."""
        i = self._next_path[(peer, dscp)]
        self._next_path[(peer, dscp)] = (i + 1) % len(self._paths)
        path = self._paths[i]
        self._seq[peer] = seq = (self._seq[peer] + 1) & 0xFFFFFFFF
        rec = self._pending[(peer, seq)] = {"path": path.name, "tx": [None, None], "at": time.monotonic(),
                                            "dscp": dscp}
        self.counters["probes_sent" if dscp is None else "class_probes_sent"] += 1
        rec["nonce"] = self._send_pair(path, wire.Packet(wire.PROBE0, self.session, seq),
                                       wire.Packet(wire.PROBE1, self.session, seq),
                                       (self.peers[peer], path.port), ("probe", peer, seq), dscp=dscp)

    def _sent(self, path: _Socket, send_id: int, real_ns: int) -> None:
        what = self._tx_ids.pop((path.fd, send_id), None)
        if what is None:
            return
        kind, a, b, i = what
        rec = self._pending.get((a, b)) if kind == "probe" else self._reflected.get(a)
        if rec and (kind == "probe" or rec["seq"] == b):
            rec["tx"][i] = self.local_ns(real_ns)

    # ---- receiving --------------------------------------------------------------------------
    def _received(self, path: _Socket, data: bytes, anc, src: str, sport: int) -> None:
        peer = self.names.get(src)
        if peer is None:  # never answer, never trust, an address that is not a peer
            self.counters["foreign_packets"] += 1
            return
        try:
            opened = self.sealer.open(data, src)
        except Rejected:  # counted by the sealer, by reason
            return
        try:
            pkt = wire.decode(opened.payload)
        except wire.Malformed:
            self.counters["malformed_packets"] += 1
            return
        real = timestamping.rx_timestamp(anc)
        if real is None:
            self.counters["no_rx_timestamp"] += 1
            return
        rx = self.local_ns(real)
        if pkt.kind == wire.WARMUP:
            return
        if pkt.kind in (wire.PROBE0, wire.PROBE1):
            self._reflect(path, pkt, rx, src, sport, opened.nonce)
        elif pkt.session == self.session:
            self._reply(peer, pkt, rx, opened.echo)
        else:
            self.counters["stale_replies"] += 1

    def _reflect(self, path: _Socket, pkt: wire.Packet, rx: int, src: str, sport: int, nonce: int) -> None:
        key = (src, pkt.session)
        rec = self._reflected.get(key)
        if rec is None:
            if len(self._reflected) >= MAX_REFLECTED:
                del self._reflected[next(iter(self._reflected))]
            rec = self._reflected[key] = {"seq": 0, "tx": [wire.NONE, wire.NONE], "probe": None}
        rec["at"] = time.monotonic()
        if pkt.kind == wire.PROBE0:
            rec["probe"] = (pkt.seq, rx)
            return
        if not rec["probe"] or rec["probe"][0] != pkt.seq:
            self.counters["unpaired_probes"] += 1
            return
        prev_seq, prev_tx = rec["seq"], (rec["tx"][0] or wire.NONE, rec["tx"][1] or wire.NONE)
        probe_rx = (rec["probe"][1], rx)
        rec.update(seq=pkt.seq, tx=[None, None], probe=None)
        self.counters["probes_reflected"] += 1
        self._send_pair(path, wire.Packet(wire.REPLY0, pkt.session, pkt.seq, probe_rx, prev_seq, prev_tx),
                        wire.Packet(wire.REPLY1, pkt.session, pkt.seq), (src, sport), ("reply", key, pkt.seq),
                        echo=nonce)
        # software send stamps are taken as the packet leaves, usually before sendto returns:
        # read them now, or the error queue wakes this thread once more for them
        self._drain_errors(path)

    def _reply(self, peer: str, pkt: wire.Packet, rx: int, echo: int) -> None:
        asked = self._pending.get((peer, pkt.seq))
        if self.sealer.secure and asked is not None and asked.get("nonce") != echo:
            self.sealer.rejected["wrong_echo"] += 1  # not an answer to the probe we sent
            return
        if pkt.kind == wire.REPLY0:
            if pkt.prev_seq and wire.NONE not in pkt.prev_tx:
                self._complete(peer, pkt.prev_seq, pkt.prev_tx)
            if rec := self._pending.get((peer, pkt.seq)):
                rec["peer_rx"], rec["rx"] = pkt.probe_rx, [rx, None]
        elif (rec := self._pending.get((peer, pkt.seq))) and "rx" in rec:
            rec["rx"][1] = rx

    def _complete(self, peer: str, seq: int, peer_tx: tuple[int, int]) -> None:
        rec = self._pending.pop((peer, seq), None)
        if rec is None or "rx" not in rec or None in rec["rx"] or None in rec["tx"]:
            self.counters["incomplete_exchanges"] += 1
            return
        self.exchanges.append(Exchange(peer, rec["path"], tuple(rec["tx"]), rec["peer_rx"], peer_tx, tuple(rec["rx"]),
                                       rec["dscp"]))
        self.counters["exchanges"] += 1

    def _expire(self, now: float) -> None:
        if now - self._last_expiry < 1.0:
            return
        self._last_expiry = now
        for key in [k for k, r in self._pending.items() if now - r["at"] > PENDING_TIMEOUT_S]:
            del self._pending[key]
            self.counters["lost_exchanges"] += 1
        for key in [k for k, r in self._reflected.items() if now - r["at"] > REFLECTED_TIMEOUT_S]:
            del self._reflected[key]
        if len(self._tx_ids) > 10_000:  # timestamps the kernel never delivered
            self._tx_ids.clear()
