"""Probe packets on the wire (probe/wire.py): exact round trips, and nothing but Malformed
for anything that is not one of our packets."""

import random
import struct

import pytest

from clockfabric.auth import seal

from clockfabric.probe.wire import (
    HEADER_SIZE,
    IP_UDP_ETH_OVERHEAD,
    MAGIC,
    NONE,
    PROBE0,
    PROBE1,
    REPLY0,
    REPLY0_SIZE,
    REPLY1,
    VERSION,
    WARMUP,
    Malformed,
    Packet,
    decode,
    encode,
    exchange_wire_bytes,
)

EPOCH = 1_800_000_000_000_000_000
U32 = 0xFFFFFFFF
I64_MAX = 2**63 - 1
HEADER_ONLY = [PROBE0, PROBE1, REPLY1, WARMUP]


def _header(kind: int, *, magic: bytes = MAGIC, version: int = VERSION, session: int = 1, seq: int = 2) -> bytes:
    return struct.pack("!2sBBII", magic, version, kind, session, seq)


def test_layout_sizes():
    assert HEADER_SIZE == 12  # magic 2, version 1, kind 1, session 4, seq 4
    assert REPLY0_SIZE == HEADER_SIZE + 8 + 8 + 4 + 8 + 8
    assert len({PROBE0, PROBE1, REPLY0, REPLY1, WARMUP}) == 5
    assert issubclass(Malformed, ValueError)


@pytest.mark.parametrize("kind", HEADER_ONLY)
@pytest.mark.parametrize("session,seq", [(0, 0), (1, 1), (0xDEADBEEF, 12345), (U32, U32)])
def test_header_only_kinds_round_trip(kind, session, seq):
    p = Packet(kind, session, seq)
    data = encode(p)
    assert len(data) == HEADER_SIZE
    assert data[:2] == MAGIC and data[2] == VERSION and data[3] == kind
    assert decode(data) == p


@pytest.mark.parametrize("probe_rx,prev_seq,prev_tx", [
    ((NONE, NONE), 0, (NONE, NONE)),  # the first reply: no previous reply to follow up
    ((EPOCH + 1, EPOCH + 10_001), 41, (EPOCH - 5, EPOCH + 9_995)),
    ((I64_MAX, -I64_MAX - 1), U32, (-1, 1)),  # the signed extremes survive
])
def test_reply0_round_trips_with_its_timestamps(probe_rx, prev_seq, prev_tx):
    p = Packet(REPLY0, 0xCAFEF00D, 42, probe_rx, prev_seq, prev_tx)
    data = encode(p)
    assert len(data) == REPLY0_SIZE
    back = decode(data)
    assert back == p
    assert all(isinstance(v, int) for v in (*back.probe_rx, back.prev_seq, *back.prev_tx))


def test_header_only_kinds_do_not_carry_reply_fields():
    """Only REPLY0 has a body: timestamps set on another kind are not sent."""
    p = Packet(PROBE0, 7, 8, (EPOCH, EPOCH + 1), 3, (EPOCH, EPOCH))
    assert decode(encode(p)) == Packet(PROBE0, 7, 8)


@pytest.mark.parametrize("data", [b"", b"C", MAGIC, _header(PROBE0)[:HEADER_SIZE - 1]])
def test_short_data_is_malformed(data):
    with pytest.raises(Malformed, match="shorter"):
        decode(data)


@pytest.mark.parametrize("magic", [b"XX", b"FC", b"cf", b"\x00\x00"])
@pytest.mark.parametrize("kind", [PROBE0, REPLY0])
def test_wrong_magic_is_malformed(magic, kind):
    data = _header(kind, magic=magic) + (bytes(REPLY0_SIZE - HEADER_SIZE) if kind == REPLY0 else b"")
    with pytest.raises(Malformed, match="magic"):
        decode(data)


@pytest.mark.parametrize("version", [0, VERSION + 1, 255])
@pytest.mark.parametrize("kind", [PROBE1, REPLY0])
def test_wrong_version_is_malformed(version, kind):
    data = _header(kind, version=version) + (bytes(REPLY0_SIZE - HEADER_SIZE) if kind == REPLY0 else b"")
    with pytest.raises(Malformed, match="version"):
        decode(data)


@pytest.mark.parametrize("kind", [0, 6, 7, 128, 255])
def test_unknown_kind_is_malformed(kind):
    with pytest.raises(Malformed, match="kind"):
        decode(_header(kind))
    with pytest.raises(Malformed):
        decode(_header(kind) + bytes(REPLY0_SIZE - HEADER_SIZE))  # a reply-sized body does not help


@pytest.mark.parametrize("kind", HEADER_ONLY)
@pytest.mark.parametrize("extra", [1, 8, REPLY0_SIZE - HEADER_SIZE])
def test_header_only_kinds_with_a_body_are_malformed(kind, extra):
    with pytest.raises(Malformed, match="length"):
        decode(encode(Packet(kind, 1, 2)) + bytes(extra))


@pytest.mark.parametrize("length", [HEADER_SIZE, HEADER_SIZE + 1, REPLY0_SIZE - 1, REPLY0_SIZE + 1, 2 * REPLY0_SIZE])
def test_reply0_of_the_wrong_length_is_malformed(length):
    good = encode(Packet(REPLY0, 1, 2, (EPOCH, EPOCH), 1, (EPOCH, EPOCH)))
    data = (good + bytes(length))[:length]
    with pytest.raises(Malformed, match="expected"):
        decode(data)


def _only_malformed(data: bytes) -> bool:
    """decode either raises Malformed or returns a packet that encodes back to the same bytes."""
    try:
        p = decode(data)
    except Malformed:
        return False
    assert encode(p) == data, data.hex()
    return True


def test_fuzz_random_bytes_only_ever_raise_malformed():
    rng = random.Random(20240611)
    decoded = 0
    for _ in range(3000):
        decoded += _only_malformed(rng.randbytes(rng.randrange(0, 80)))
    assert decoded == 0  # random bytes essentially never start with our magic and version


def test_fuzz_plausible_packets_only_ever_raise_malformed():
    """Our prefix with random kinds, bodies and lengths, and valid packets with bytes flipped,
    cut short or extended: every path through decode."""
    rng = random.Random(7)
    valid = [encode(Packet(k, rng.getrandbits(32), rng.getrandbits(32))) for k in HEADER_ONLY]
    valid.append(encode(Packet(REPLY0, 5, 6, (EPOCH, EPOCH + 3), 9, (EPOCH - 2, EPOCH + 8))))
    decoded = rejected = 0
    for i in range(4000):
        if i % 2:
            data = MAGIC + bytes([VERSION, rng.randrange(256)]) + rng.randbytes(rng.choice([8, 9, 20, 36, 40, 44, 45]))
        else:
            data = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 4)):
                how = rng.randrange(3)
                if how == 0 and data:
                    data[rng.randrange(len(data))] = rng.randrange(256)
                elif how == 1:
                    del data[rng.randrange(len(data) + 1):]
                else:
                    data += rng.randbytes(rng.randrange(1, 10))
            data = bytes(data)
        if _only_malformed(data):
            decoded += 1
        else:
            rejected += 1
    # both outcomes were exercised: flipped timestamp or id bytes still decode, the rest do not
    assert decoded > 100 and rejected > 1000


def test_exchange_wire_bytes_matches_the_packets_of_one_exchange():
    """One exchange: WARMUP, PROBE0, PROBE1 out; WARMUP, REPLY0, REPLY1 back; each datagram
    pays the IP, UDP and Ethernet headers, and its seal."""
    out = [Packet(WARMUP, 1, 2), Packet(PROBE0, 1, 2), Packet(PROBE1, 1, 2)]
    back = [Packet(WARMUP, 1, 2), Packet(REPLY0, 1, 2, (EPOCH, EPOCH), 1, (EPOCH, EPOCH)), Packet(REPLY1, 1, 2)]
    total = sum(len(encode(p)) + seal.OVERHEAD + IP_UDP_ETH_OVERHEAD for p in out + back)
    assert exchange_wire_bytes() == total
    assert IP_UDP_ETH_OVERHEAD == 42
    assert exchange_wire_bytes() == 6 * (42 + 34) + 5 * 12 + 48 == 564

