"""Path liveness between host agents: BFD-style heartbeats on every path to every peer.

Each host sends a small UDP heartbeat to each peer on each path (a plane's NIC and one of a
few UDP ports, which the switches hash onto different ECMP paths) every `interval_s`, as
BFD's asynchronous mode does. Every round of heartbeats carries one sequence number, so a
path is dead in that direction when `detect_mult` newer rounds have arrived from the peer
over other paths and none over this one. Counting rounds rather than seconds means a
stalled agent (a busy CPU, a long pause) makes no path look dead, on either side: its
rounds simply stop, on every path at once. A peer heard on no path for `silent_s` is
*silent* (gone, or cut off), which is no evidence about any one path.

Each heartbeat also carries what its sender sees: the paths from us that it hears nothing
on, and its own NICs that are down. So a host learns of a failure in its outgoing direction
one heartbeat after the peer noticed, over any path that still works, and of a peer's dead
NIC within one interval of the peer's link event.

Each socket is bound to its NIC by the NIC's index, which a NIC that comes back as another
device does not keep: `rebind()`, on every link change, binds them to the new one.

The sockets are read once per tick, never woken per packet: a wake-up costs more than the
few packets it would read. The kernel stamps each arrival (SO_TIMESTAMPNS), so the one-way
delay of every heartbeat is known whenever it is read.

Which spine a path takes is the fabric's hash of its 5-tuple. Left to chance, a peer's few
paths on a plane may all hash onto the same spine and miss a failure on another (with two
ports and two spines, one peer in four). So each plane also has `senders` send-only sockets,
and `place()` picks, per peer, the source socket of each path so that the paths cross distinct
spines, from a trace of the candidates (failover.py does it with probe.paths.trace).

Version 2 adds what transparent mode (steer.py) needs: each heartbeat carries its send time,
and the standing queue its sender sees on each of the receiver's paths toward it, so every host
learns the queueing in the direction it *sends*. Version 1 heartbeats are answered in version 1
(their agents read no other length), and understood, once sealed as every heartbeat is.

Every heartbeat is sealed with the fleet key (auth/seal.py): a forged or replayed one is
counted and dropped, so no host without the key can make a path look alive, or dead.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field

from clockfabric.auth.seal import HEARTBEAT, Rejected, Sealer
from clockfabric.netdev import bind_to_rail
from clockfabric.traffic.steer_decide import DelayBook, decode_queue, encode_queue

MAGIC = b"CFHB"
VERSION = 2
FORMAT = struct.Struct("!4sBBBxIIQH")  # magic, version, plane, port index, session, seq, dead_in, nics_down
TRAILER = struct.Struct("!QB")  # v2: send time (ns, the sender's clock), count of queue reports (uint16 each)
SO_TIMESTAMPNS = 35  # SCM_TIMESTAMPNS has the same number
TIMESPEC = struct.Struct("=qq")
RECV_BYTES = 512


@dataclass(frozen=True)
class Heartbeat:
    plane: int
    port: int  # index among the plane's ports
    session: int  # the sender's run: a new one means the sender restarted
    seq: int
    dead_in: int  # bit plane*ports+port: paths *to* the sender it hears nothing on
    nics_down: int  # bit plane: the sender's NICs that are down
    sent_ns: int = 0  # v2: when it was sent, by the sender's clock (0: not known)
    queues: tuple[int, ...] = ()  # v2: index plane*ports+port: the standing queue the sender sees on
    #                               that path *from* the receiver, in QUEUE_UNIT_S (UNKNOWN: none)
    version: int = VERSION

    def pack(self) -> bytes:
        head = FORMAT.pack(MAGIC, self.version, self.plane, self.port, self.session, self.seq, self.dead_in,
                           self.nics_down)
        if self.version == 1:
            return head
        return head + TRAILER.pack(self.sent_ns, len(self.queues)) + struct.pack(f"!{len(self.queues)}H",
                                                                                 *self.queues)

    @classmethod
    def unpack(cls, data: bytes) -> Heartbeat | None:
        if len(data) < FORMAT.size:
            return None
        magic, version, plane, port, session, seq, dead_in, nics_down = FORMAT.unpack_from(data)
        if magic != MAGIC:
            return None
        if version == 1 and len(data) == FORMAT.size:
            return cls(plane, port, session, seq, dead_in, nics_down, version=1)
        if version != 2 or len(data) < FORMAT.size + TRAILER.size:
            return None
        sent_ns, n = TRAILER.unpack_from(data, FORMAT.size)
        if len(data) != FORMAT.size + TRAILER.size + 2 * n:
            return None
        queues = struct.unpack_from(f"!{n}H", data, FORMAT.size + TRAILER.size)
        return cls(plane, port, session, seq, dead_in, nics_down, sent_ns, queues, 2)


@dataclass
class Report:
    """What we know of one peer in its current session (agent run)."""

    session: int
    first_seq: int  # the round we first heard: paths never heard count from here
    top_seq: int  # the newest round heard on any path
    heard_at: float  # when anything last arrived
    dead_in: int = 0
    nics_down: int = 0
    version: int = VERSION
    out_queues: dict[tuple[int, int], float | None] = field(default_factory=dict)  # our paths to it, as it sees them


class Liveness:
    """The heartbeat sockets and what they have heard; `tick()` reads, `send()` writes."""

    def __init__(self, address: str, peers: dict[str, str], nics: dict[int, str], *, ports: int = 2,
                 base_port: int = 7290, interval_s: float = 0.1, detect_mult: int = 3, silent_s: float = 1.0,
                 session: int = 0, senders: int = 0, sealer: Sealer | None = None):
        """`peers`: name -> address; `nics`: plane -> NIC name; `senders`: extra send-only sockets
        per plane (ports base_port + ports ...), the candidates place() may put a path on."""
        if max(nics) * ports + ports > 64:
            raise ValueError("heartbeat paths are numbered in 64 bits: too many planes x ports")
        self.peers = peers
        self.sealer = sealer or Sealer(HEARTBEAT, address, None)
        self.names = {a: n for n, a in peers.items()}
        self.nics = nics
        self.ports = ports
        self.base_port = base_port
        self.interval_s = interval_s
        self.detect_mult = detect_mult
        self.silent_s = silent_s
        self.session = session
        self.seq = 0
        self.last_seq: dict[tuple[str, int, int], int] = {}  # (peer, plane, port) -> newest round on it
        self.reports: dict[str, Report] = {}  # peers heard
        self.counters = {"heartbeats_sent": 0, "heartbeats_received": 0, "send_errors": 0, "bad_heartbeats": 0}
        self.delays = DelayBook()  # one-way delays of every path from every peer
        self.n_paths = (max(nics) + 1) * ports
        self.socks: dict[tuple[int, int], socket.socket] = {}  # (plane, port): where heartbeats arrive
        self.senders: dict[tuple[int, int], socket.socket] = {}  # (plane, c): a path may leave by any
        self.via: dict[tuple[str, int, int], int] = {}  # (peer, plane, port) -> the sender placed on it
        try:
            for plane, nic in nics.items():
                for c in range(ports + senders):
                    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    self.senders[(plane, c)] = s
                    if c < ports:  # the first `ports` also receive: the paths' own ports
                        self.socks[(plane, c)] = s
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, nic.encode())
                    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0xC0)  # CS6, network control, as BFD uses
                    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)  # arrival times from the kernel
                    s.bind((address, base_port + c))
                    s.setblocking(False)
        except OSError:
            self.close()
            raise

    def close(self) -> None:
        for s in self.senders.values():
            s.close()

    def rebind(self) -> set[str]:
        """Every socket bound again to its NIC where the NIC is another device now (a NIC back
        under a new index: netdev.bind_to_rail); the NICs whose sockets moved."""
        return {self.nics[plane] for (plane, _), s in self.senders.items() if bind_to_rail(s, self.nics[plane])}

    def candidates(self, plane: int) -> list[int]:
        """The source ports a path on `plane` may leave from."""
        return [self.base_port + c for p, c in self.senders if p == plane]

    def place(self, peer: str, plane: int, hops: dict[int, dict[int, str | None]]) -> dict[int, str | None]:
        """Put each of the plane's paths to `peer` on a sender whose flow to that path's port
        crosses a spine no other path of it crosses. `hops`: path -> source port -> the switch
        that answered a trace of (source port -> peer:path port), None where none did. A path
        with no new spine to take keeps its own socket. Returns path -> the spine it now takes."""
        taken: dict[int, str | None] = {}
        for k in range(self.ports):
            answered = hops.get(k, {})
            mine = self.base_port + k  # its own socket first: no change unless needed
            order = [mine] + [sport for sport in sorted(answered) if sport != mine]
            fresh = [sport for sport in order if answered.get(sport) and answered[sport] not in taken.values()]
            sport = fresh[0] if fresh else mine
            self.via[(peer, plane, k)] = sport - self.base_port
            taken[k] = answered.get(sport)
        return taken

    @staticmethod
    def bit(plane: int, port: int, ports: int) -> int:
        return 1 << (plane * ports + port)

    # ---- receiving
    def tick(self, now: float) -> None:
        """Read every socket, and again until a whole pass finds nothing: if this thread is
        paused between two sockets, the rounds that piled up on the first are read before
        the paths are compared (else the first would look rounds behind the others)."""
        for _ in range(8):
            if not sum(self._read(plane, k, s, now) for (plane, k), s in self.socks.items()):
                return

    def _read(self, plane: int, k: int, s: socket.socket, now: float) -> int:
        n = 0
        while True:
            try:
                data, ancillary, _, (src, _) = s.recvmsg(RECV_BYTES, socket.CMSG_SPACE(TIMESPEC.size))
            except BlockingIOError:
                return n
            except OSError:  # e.g. an ICMP error from an earlier send surfacing here
                self.counters["send_errors"] += 1
                continue
            n += 1
            arrived_ns = 0
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= TIMESPEC.size:
                    sec, nsec = TIMESPEC.unpack_from(value)
                    arrived_ns = sec * 1_000_000_000 + nsec
            if not data:  # an empty datagram: a path trace of a peer's reached us, not a heartbeat
                continue
            peer = self.names.get(src)
            try:
                hb = Heartbeat.unpack(self.sealer.open(data, src).payload) if peer else None
            except Rejected:  # counted by the sealer, by reason
                continue
            if hb is None or peer is None or (hb.plane, hb.port) != (plane, k):
                self.counters["bad_heartbeats"] += 1
                continue
            self.counters["heartbeats_received"] += 1
            self._heard(peer, plane, k, hb, now, arrived_ns or time.time_ns())

    def _heard(self, peer: str, plane: int, k: int, hb: Heartbeat, now: float, arrived_ns: int = 0) -> None:
        report = self.reports.get(peer)
        if report is None or report.session != hb.session:  # new peer, or its agent restarted
            report = self.reports[peer] = Report(hb.session, hb.seq, hb.seq, now)
            for path in self.socks:
                self.last_seq.pop((peer, *path), None)
            self.delays.forget(peer)
        report.heard_at = now
        report.version = hb.version
        key = (peer, plane, k)
        self.last_seq[key] = max(self.last_seq.get(key, hb.seq), hb.seq)
        if hb.sent_ns and arrived_ns:
            self.delays.add(peer, (plane, k), now, (arrived_ns - hb.sent_ns) / 1e9)
        if hb.seq >= report.top_seq:  # the newest round says what the peer sees now
            report.top_seq, report.dead_in, report.nics_down = hb.seq, hb.dead_in, hb.nics_down
            report.out_queues = {divmod(i, self.ports): decode_queue(v) for i, v in enumerate(hb.queues)}

    def out_queues(self, peer: str) -> dict[int, float | None]:
        """plane -> the standing queue on our paths to `peer`, as it last told us: the worst of
        the plane's paths (a flow may hash onto any of them); None where it knows none."""
        report = self.reports.get(peer)
        out: dict[int, float | None] = {}
        for plane in self.nics:
            known = [q for (p, _), q in (report.out_queues.items() if report else ()) if p == plane and q is not None]
            out[plane] = max(known) if known else None
        return out

    def dead_in(self, peer: str) -> list[tuple[int, int]]:
        """Paths from `peer` to us that missed its last `detect_mult` rounds while others got them."""
        report = self.reports.get(peer)
        if report is None:
            return []
        return [(plane, k) for plane, k in self.socks
                if report.top_seq - self.last_seq.get((peer, plane, k), report.first_seq) >= self.detect_mult]

    def silent(self, peer: str, now: float) -> bool:
        """Heard once, and nothing since on any path for `silent_s`: gone, or cut off."""
        report = self.reports.get(peer)
        return report is not None and now - report.heard_at > self.silent_s

    # ---- sending
    def send(self, now: float, nics_down: int, up: set[int]) -> None:
        """One heartbeat to every peer on every path whose NIC is up."""
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        for peer, address in self.peers.items():
            dead = sum(self.bit(p, k, self.ports) for p, k in self.dead_in(peer))
            report = self.reports.get(peer)
            version = report.version if report else VERSION
            queues: tuple[int, ...] = ()
            if version >= 2:
                seen = self.delays.queues(peer, now)
                queues = tuple(encode_queue(seen.get(divmod(i, self.ports))) for i in range(self.n_paths))
            for plane, k in self.socks:
                if plane not in up:
                    continue
                data, _ = self.sealer.seal(Heartbeat(plane, k, self.session, self.seq, dead, nics_down,
                                                     time.time_ns(), queues, version).pack(), address)
                s = self.senders[(plane, self.via.get((peer, plane, k), k))]
                try:
                    s.sendto(data, (address, self.base_port + k))
                    self.counters["heartbeats_sent"] += 1
                except OSError:
                    self.counters["send_errors"] += 1
