"""Path discovery on ECMP fabrics: which source port the switches hash onto which spine.

A switch hashes each packet's 5-tuple with a seed of its own, so a host cannot compute
where a flow goes: it must ask the fabric. Like Paris traceroute, we send a packet with
the flow's exact 5-tuple and a small TTL (2: the hop after the leaf, a spine) and read
the "time exceeded" each switch answers with: the answering address names the path.
The protocol is part of the hash, so TCP flows are traced with TCP SYNs and UDP flows
(the agent's clock probes) with empty UDP datagrams.
"""

from __future__ import annotations

import errno
import ipaddress
import math
import random
import select
import socket
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from clockfabric.errors import ClockfabricError
from clockfabric.topology.classes import PRIORITY_DSCP

# Candidate source ports: above the kernel's ephemeral range (32768-60999, so connect() never
# hands one out behind our back) and the collective's listen ports (20000-32000).
SPORTS = range(61000, 65536)
ICMP_TIME_EXCEEDED = 11
SOL_RAW, ICMP_FILTER = 255, 1  # linux/icmp.h: a raw ICMP socket's filter of types to drop
SYN, RST = 0x02, 0x04
PROTOCOLS = {"tcp": socket.IPPROTO_TCP, "udp": socket.IPPROTO_UDP}

Learner = Callable[..., dict[int, str | None]]


@dataclass(frozen=True)
class Path:
    hop: str | None  # the address that answered at the probe TTL; None: nothing did (the peer was nearer)
    sport: int  # a TCP source port whose flows the fabric hashes onto that hop


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071): ones' complement of the ones' complement sum of 16-bit words."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def tcp_syn(src: str, dst: str, sport: int, dport: int, seq: int) -> bytes:
    """A 20-byte TCP SYN header; the checksum covers the IPv4 pseudo-header, as the receiver checks it."""
    header = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, SYN, 64240, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(header))
    return header[:16] + struct.pack("!H", checksum(pseudo + header)) + header[18:]


def udp_header(sport: int, dport: int) -> bytes:
    """An 8-byte UDP header with no payload; checksum 0 is "none", which IPv4 allows."""
    return struct.pack("!HHHH", sport, dport, 8, 0)


Flow = tuple[str, str, int, int]  # src, dst, sport, dport
Ports = tuple[int, int]  # sport, dport


def parse_time_exceeded(packet: bytes) -> tuple[str, int, Flow] | None:
    """(answering hop, IP protocol, quoted flow) of an IPv4 ICMP time exceeded quoting a TCP or
    UDP packet, or None for anything else."""
    if len(packet) < 20:
        return None
    ihl = (packet[0] & 0x0F) * 4
    if len(packet) < ihl + 8 + 20 + 4 or packet[ihl] != ICMP_TIME_EXCEEDED:
        return None
    inner = packet[ihl + 8:]
    inner_ihl = (inner[0] & 0x0F) * 4
    if inner[9] not in PROTOCOLS.values() or len(inner) < inner_ihl + 4:
        return None
    sport, dport = struct.unpack_from("!HH", inner, inner_ihl)
    flow = (socket.inet_ntoa(inner[12:16]), socket.inet_ntoa(inner[16:20]), sport, dport)
    return socket.inet_ntoa(packet[12:16]), inner[9], flow


def _reply_from_peer(packet: bytes, src: str, dst: str, seqs: dict[Ports, int]) -> Ports | None:
    """The flow (ours, theirs) the peer itself answered: the probe got all the way. Only a SYN-ACK
    or RST acknowledging our SYN's sequence number (`seqs`) is an answer: tracing a live flow, the
    raw socket also reads that flow's own segments from the peer, which say nothing of the probe."""
    ihl = (packet[0] & 0x0F) * 4
    if len(packet) < ihl + 14 or packet[9] != socket.IPPROTO_TCP:
        return None
    if socket.inet_ntoa(packet[12:16]) != dst or socket.inet_ntoa(packet[16:20]) != src:
        return None
    their, ours, _, ack = struct.unpack_from("!HHII", packet, ihl)
    flags = packet[ihl + 13]
    if not flags & (SYN | RST) or (seq := seqs.get((ours, their))) is None or ack != (seq + 1) & 0xFFFFFFFF:
        return None
    return ours, their


def _sockets(src: str, ttl: int, proto: int, device: str | None) -> tuple[socket.socket, socket.socket]:
    try:
        icmp = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    except PermissionError:
        raise ClockfabricError("path discovery sends raw probes, which needs root or CAP_NET_RAW; "
                               "run it with sudo") from None
    try:
        icmp.setsockopt(SOL_RAW, ICMP_FILTER, struct.pack("I", ~(1 << ICMP_TIME_EXCEEDED) & 0xFFFFFFFF))
        probe = socket.socket(socket.AF_INET, socket.SOCK_RAW, proto)  # the kernel adds the IP header
        try:
            probe.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
            # the time-and-control class where the fabric has one: a trace of a flow that fills a
            # FIFO is otherwise dropped in the very queue it should see past (ECMP hashes ports,
            # not the DSCP, so the path is the flow's own)
            probe.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, PRIORITY_DSCP << 2)
            if device:  # a rail: out of this NIC, whatever the routes prefer
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, device.encode())
            probe.bind((src, 0))
        except OSError as e:
            probe.close()
            raise ClockfabricError(f"cannot send from {src}{f' on {device}' if device else ''}: {e.strerror}; "
                                   "give an address (and NIC) of this host") from None
    except BaseException:
        icmp.close()
        raise
    return icmp, probe


def learn(src: str, dst: str, dport: int, *, sports: Iterable[int], ttl: int = 2,
          timeout_s: float = 0.5) -> dict[int, str | None]:
    """For each source port, the address that answers a TCP SYN src:port -> dst:dport at `ttl`."""
    found = trace(src, dst, [(port, dport) for port in sports], ttl=ttl, timeout_s=timeout_s)
    return {sport: hop for (sport, _), hop in found.items()}


def trace(src: str, dst: str, flows: Iterable[Ports], *, proto: str = "tcp", ttl: int = 2,
          timeout_s: float = 0.5, device: str | None = None) -> dict[Ports, str | None]:
    """For each (sport, dport), the address that answers a `proto` packet src:sport -> dst:dport at `ttl`.

    All probes go out at once, then replies are collected until each is answered or the
    timeout passes; unanswered flows are probed once more (a probe or its reply may be
    lost). None: no answer, or (TCP) the peer itself answered our SYN (a SYN-ACK or RST
    acknowledging it): it is fewer than `ttl` hops away. A live flow's own segments are no
    answer, so a busy flow is traced as well as an idle one. `device`: send out of this NIC.
    Must run in the namespace that owns `src`.
    Needs root or CAP_NET_RAW.
    """
    if proto not in PROTOCOLS:
        raise ClockfabricError(f"cannot trace {proto!r} flows; protocols are {', '.join(PROTOCOLS)}")
    wanted = list(dict.fromkeys(flows))
    found: dict[Ports, str | None] = dict.fromkeys(wanted)
    pending = set(wanted)
    icmp, probe = _sockets(src, ttl, PROTOCOLS[proto], device)
    rng = random.Random()
    seqs = {f: rng.getrandbits(32) for f in wanted}  # what a peer's own answer acknowledges
    try:
        for _ in range(2):
            for sport, dport in (f for f in wanted if f in pending):
                packet = (tcp_syn(src, dst, sport, dport, seqs[(sport, dport)]) if proto == "tcp"
                          else udp_header(sport, dport))
                try:
                    probe.sendto(packet, (dst, 0))
                except OSError as e:
                    if e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
                        raise ClockfabricError(f"no route from {src} to {dst}") from None
                    # a full queue or a NIC without carrier: this probe is lost, as on a wire
            # a UDP peer answers nothing we could tell from other traffic: only TCP's socket is read
            _collect(icmp, probe if proto == "tcp" else None, (src, dst, PROTOCOLS[proto]), pending, found,
                     time.monotonic() + timeout_s, seqs)
            if not pending:
                break
    finally:
        icmp.close()
        probe.close()
    return found


def _collect(icmp: socket.socket, tcp: socket.socket | None, key: tuple[str, str, int], pending: set[Ports],
             found: dict[Ports, str | None], deadline: float, seqs: dict[Ports, int]) -> None:
    src, dst, proto = key
    while pending and (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([icmp] + ([tcp] if tcp else []), [], [], left)
        for sock in ready:
            packet = sock.recv(65535)
            if sock is icmp:
                reply = parse_time_exceeded(packet)
                if reply and reply[1] == proto and reply[2][:2] == (src, dst) and (ports := reply[2][2:]) in pending:
                    found[ports] = reply[0]
                    pending.discard(ports)
            else:
                pending.discard(_reply_from_peer(packet, src, dst, seqs))


def _by_hop(found: dict[int, str | None]) -> dict[str | None, list[int]]:
    """Ports grouped by hop. Unanswered ports are a path of their own only if nothing answered at all
    (the peer is nearer than the probe TTL); otherwise they are probes lost, on some unknown path."""
    groups: dict[str | None, list[int]] = {}
    for port, hop in found.items():
        groups.setdefault(hop, []).append(port)
    if len(groups) > 1:
        groups.pop(None, None)
    return dict(sorted(groups.items(), key=lambda kv: (kv[0] is None, _address_key(kv[0]))))


def _address_key(hop: str | None) -> tuple[int, str]:
    if hop is None:
        return 0, ""
    try:
        return int(ipaddress.ip_address(hop)), ""
    except ValueError:
        return 0, str(hop)


def spread(src: str, dst: str, dport: int, *, want: int, ttl: int = 2, timeout_s: float = 0.5, seed: int = 0,
           batch: int = 16, max_ports: int = 256, learn_fn: Learner | None = None) -> list[Path]:
    """`want` source ports spread as evenly as possible over the distinct hops (round robin).

    Fresh candidate ports (drawn from SPORTS with `seed`) are probed `batch` at a time until
    every hop seen has its share, or `max_ports` have been tried. Fewer than `want` paths come
    back only if that many ports never answered.
    """
    if want < 1:
        raise ClockfabricError(f"want at least one path (got {want})")
    probe = learn_fn or learn
    candidates = random.Random(seed).sample(SPORTS, min(max_ports, len(SPORTS)))
    found: dict[int, str | None] = {}
    groups: dict[str | None, list[int]] = {}
    for start in range(0, len(candidates), batch):
        found |= probe(src, dst, dport, sports=candidates[start:start + batch], ttl=ttl, timeout_s=timeout_s)
        groups = _by_hop(found)
        share = math.ceil(want / len(groups))
        if all(len(ports) >= share for ports in groups.values()):
            break
    return round_robin(groups, want)


def round_robin(groups: dict[str | None, list[int]], want: int) -> list[Path]:
    """Take one port from each hop in turn, skipping hops that have run out."""
    chosen: list[Path] = []
    for i in range(max((len(p) for p in groups.values()), default=0)):
        for hop, ports in groups.items():
            if i < len(ports) and len(chosen) < want:
                chosen.append(Path(hop, ports[i]))
    return chosen


class PathTable:
    """What was learned per (src, dst, dport), and when. A path is learned again when older than
    max_age_s, or after forget(): call it on link events, since a changed fabric moves the hash."""

    def __init__(self, *, want: int = 4, ttl: int = 2, max_age_s: float = 300.0, seed: int = 0,
                 learn_fn: Learner | None = None, clock: Callable[[], float] = time.monotonic):
        self.want, self.ttl, self.max_age_s, self.seed = want, ttl, max_age_s, seed
        self._learn, self._clock = learn_fn, clock
        self._entries: dict[tuple[str, str, int], tuple[float, list[Path]]] = {}

    def paths(self, src: str, dst: str, dport: int) -> list[Path]:
        key = (src, dst, dport)
        entry = self._entries.get(key)
        now = self._clock()
        if entry is None or now - entry[0] > self.max_age_s:
            entry = (now, spread(src, dst, dport, want=self.want, ttl=self.ttl, seed=self.seed,
                                 learn_fn=self._learn))
            self._entries[key] = entry
        return entry[1]

    def learned_at(self, src: str, dst: str, dport: int) -> float | None:
        entry = self._entries.get((src, dst, dport))
        return entry[0] if entry else None

    def forget(self, src: str | None = None, dst: str | None = None) -> None:
        """Drop what was learned (for one source or destination address, or all): learned again on next use."""
        for key in [k for k in self._entries if src in (None, k[0]) and dst in (None, k[1])]:
            del self._entries[key]
