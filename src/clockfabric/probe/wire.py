"""Probe packets on the wire: small, fixed-layout, versioned, checked before use.

A prober sends a coded pair PROBE0, PROBE1 a known gap apart, after a WARMUP packet that
the reflector ignores (replies get one too): in a software fabric (the lab) the first packet after a quiet spell
crosses every hop on cold caches and arrives tens of microseconds late, which would make
almost no pair pure; the warm-up takes that cost instead. The reflector answers with
its own pair REPLY0, REPLY1; REPLY0 carries the receive timestamps of the probe pair and
the send timestamps of the reflector's previous reply pair (the kernel hands those over
only after the send, so they ride on the next reply, as a PTP follow-up would).
All timestamps are in the sending host's own clock. On the wire each packet is followed by
the fleet key's seal (auth/seal.py), which the engine adds and checks.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from clockfabric.auth import seal

MAGIC = b"CF"
VERSION = 1
PROBE0, PROBE1, REPLY0, REPLY1, WARMUP = 1, 2, 3, 4, 5
_HEADER = struct.Struct("!2sBBII")  # magic, version, kind, session, seq
_REPLY = struct.Struct("!qqIqq")  # probe rx (2), previous reply seq, its tx (2)
NONE = 0  # "no previous reply" timestamps
HEADER_SIZE = _HEADER.size
REPLY0_SIZE = _HEADER.size + _REPLY.size
IP_UDP_ETH_OVERHEAD = 20 + 8 + 14  # what each datagram costs on an Ethernet link


class Malformed(ValueError):
    """Not one of our packets, or a damaged one: count it and drop it."""


@dataclass(frozen=True)
class Packet:
    kind: int
    session: int  # the prober's random id for this run: replies to an old run are not ours
    seq: int
    probe_rx: tuple[int, int] = (NONE, NONE)
    prev_seq: int = 0
    prev_tx: tuple[int, int] = (NONE, NONE)


def encode(p: Packet) -> bytes:
    head = _HEADER.pack(MAGIC, VERSION, p.kind, p.session, p.seq)
    if p.kind == REPLY0:
        return head + _REPLY.pack(*p.probe_rx, p.prev_seq, *p.prev_tx)
    return head


def decode(data: bytes) -> Packet:
    if len(data) < _HEADER.size:
        raise Malformed(f"{len(data)} bytes is shorter than a probe header")
    magic, version, kind, session, seq = _HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise Malformed("not a clockfabric probe (magic or version)")
    if kind == REPLY0:
        if len(data) != REPLY0_SIZE:
            raise Malformed(f"reply of {len(data)} bytes, expected {REPLY0_SIZE}")
        rx0, rx1, prev_seq, tx0, tx1 = _REPLY.unpack_from(data, _HEADER.size)
        return Packet(kind, session, seq, (rx0, rx1), prev_seq, (tx0, tx1))
    if kind not in (PROBE0, PROBE1, REPLY1, WARMUP) or len(data) != _HEADER.size:
        raise Malformed(f"unknown kind {kind} or wrong length {len(data)}")
    return Packet(kind, session, seq)


def exchange_wire_bytes() -> int:
    """Bytes one probe exchange (a pair each way) puts on the links, headers and seals included."""
    return 6 * (IP_UDP_ETH_OVERHEAD + seal.OVERHEAD) + 5 * HEADER_SIZE + REPLY0_SIZE
