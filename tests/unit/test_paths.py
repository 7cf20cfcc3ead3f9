"""Path discovery without a network: the SYN we build, the replies we parse, the port spread, the cache."""

import socket
import struct

import pytest

from clockfabric.errors import ClockfabricError
from clockfabric.probe import paths
from clockfabric.probe.paths import Path, PathTable, parse_time_exceeded, round_robin, spread, tcp_syn, udp_header

# A real ICMP time exceeded recorded in a leafspine(4, 2, 2) lab: spine1 (10.64.0.11) answering
# h0's SYN 10.0.0.1:61000 -> 10.0.0.3:5000 (seq 12345) sent with TTL 2; it quotes the whole probe.
RECORDED = bytes.fromhex(
    "45c000444ba000003f011b0e0a40000b0a0000010b00091e0000000045000028577d400001060e500a0000010a000003"
    "ee48138800003039000000005002faf06ee40000")


def ones_complement_sum(data: bytes) -> int:
    """An independent RFC 1071 sum: add all 16-bit words as one big integer, fold by modulo 0xFFFF."""
    words = [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]
    folded = sum(words) % 0xFFFF  # end-around carry, except that a full 0xFFFF comes out as 0
    return (folded or 0xFFFF) if any(words) else 0


def test_checksum_rfc1071_example():
    # RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to ddf2, whose complement is 220d
    assert paths.checksum(bytes.fromhex("0001f203f4f5f6f7")) == 0x220D
    assert paths.checksum(b"\x01") == ~0x0100 & 0xFFFF  # odd length: padded with a zero byte


def test_tcp_syn_header_and_checksum():
    header = tcp_syn("10.0.0.1", "10.0.0.3", 61000, 5000, 12345)
    sport, dport, seq, ack, offset, flags, window, csum, urgent = struct.unpack("!HHIIBBHHH", header)
    assert (sport, dport, seq, ack, offset >> 4, flags, urgent) == (61000, 5000, 12345, 0, 5, 0x02, 0)
    assert window > 0
    pseudo = socket.inet_aton("10.0.0.1") + socket.inet_aton("10.0.0.3") + struct.pack("!BBH", 0, 6, 20)
    zeroed = header[:16] + b"\0\0" + header[18:]
    assert csum == ~ones_complement_sum(pseudo + zeroed) & 0xFFFF
    assert ones_complement_sum(pseudo + header) == 0xFFFF  # what a receiver checks
    assert csum == 0x6EE4  # the value the lab's switch quoted back (RECORDED)


def test_tcp_syn_is_what_the_switch_quoted():
    assert RECORDED[48:68] == tcp_syn("10.0.0.1", "10.0.0.3", 61000, 5000, 12345)


def test_parse_recorded_time_exceeded():
    assert parse_time_exceeded(RECORDED) == ("10.64.0.11", 6, ("10.0.0.1", "10.0.0.3", 61000, 5000))


def icmp_packet(icmp_type: int, proto: int = 6, quoted: int = 8) -> bytes:
    inner_ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 1, 0, 1, proto, 0,
                           socket.inet_aton("10.0.0.5"), socket.inet_aton("10.0.0.9"))
    inner = inner_ip + struct.pack("!HHI", 61234, 20000, 7)[:quoted]
    icmp = struct.pack("!BBHI", icmp_type, 0, 0, 0) + inner
    outer = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(icmp), 0, 0, 64, 1, 0,
                        socket.inet_aton("10.64.0.7"), socket.inet_aton("10.0.0.5"))
    return outer + icmp


def test_parse_constructed_packets():
    # RFC 792 promises only 8 bytes of the original datagram: enough for the ports
    assert parse_time_exceeded(icmp_packet(11)) == ("10.64.0.7", 6, ("10.0.0.5", "10.0.0.9", 61234, 20000))
    assert parse_time_exceeded(icmp_packet(3)) is None  # unreachable, not time exceeded
    # a UDP probe (the agent's probe paths): the protocol says which kind of trace it answers
    assert parse_time_exceeded(icmp_packet(11, proto=17)) == ("10.64.0.7", 17, ("10.0.0.5", "10.0.0.9", 61234, 20000))
    assert parse_time_exceeded(icmp_packet(11, proto=1)) is None  # ICMP quoted: not a probe of ours
    assert parse_time_exceeded(icmp_packet(11, quoted=2)) is None  # too short to hold the ports
    assert parse_time_exceeded(b"") is None


def test_udp_header_is_empty_and_unchecksummed():
    assert udp_header(7304, 7300) == struct.pack("!HHHH", 7304, 7300, 8, 0)


def test_trace_refuses_an_unknown_protocol():
    with pytest.raises(ClockfabricError, match="'sctp'.*tcp, udp"):
        paths.trace("10.0.0.1", "10.0.0.3", [(61000, 5000)], proto="sctp")


def stand_in(spines: int, *, silent: set[int] = frozenset(), near: bool = False):
    """A learn() over a fabric hashing port p onto spine p % spines; records the calls."""
    calls = []

    def learn(src, dst, dport, *, sports, ttl, timeout_s):
        sports = list(sports)
        calls.append(sports)
        return {p: None if near or p in silent else f"10.64.0.{p % spines}" for p in sports}

    return learn, calls


def test_spread_round_robin_over_hops():
    learn, calls = stand_in(2)
    got = spread("10.0.0.1", "10.0.0.3", 5000, want=4, seed=3, learn_fn=learn)
    assert [p.hop for p in got] == ["10.64.0.0", "10.64.0.1"] * 2
    assert len({p.sport for p in got}) == 4
    assert all(paths.SPORTS.start <= p.sport < paths.SPORTS.stop for p in got)
    assert not any(32768 <= p.sport <= 60999 or 20000 <= p.sport <= 32000 for p in got)
    assert len(calls) == 1  # one batch of 16 was enough
    assert got == spread("10.0.0.1", "10.0.0.3", 5000, want=4, seed=3, learn_fn=stand_in(2)[0])  # seeded
    assert got != spread("10.0.0.1", "10.0.0.3", 5000, want=4, seed=4, learn_fn=stand_in(2)[0])


def test_spread_keeps_probing_until_every_hop_has_its_share():
    learn, calls = stand_in(3)
    got = spread("a", "b", 1, want=12, batch=4, learn_fn=learn)
    hops = [p.hop for p in got]
    assert len(got) == 12 and all(hops.count(h) == 4 for h in set(hops)) and len(set(hops)) == 3
    assert len(calls) >= 3 and len({p for c in calls for p in c}) == sum(map(len, calls))  # always fresh ports


def test_spread_is_bounded_and_uneven_when_a_hop_is_rare():
    calls = []

    def learn(src, dst, dport, *, sports, ttl, timeout_s):
        calls.append(sports)
        return {p: "rare" if p == first else "common" for p in sports}

    first = spread("a", "b", 1, want=1, learn_fn=lambda *a, **k: {p: "x" for p in k["sports"]})[0].sport
    got = spread("a", "b", 1, want=6, batch=8, max_ports=40, learn_fn=learn)
    assert [p.hop for p in got] == ["common", "rare", "common", "common", "common", "common"]
    assert len(calls) == 5  # the rare hop never got its share: gave up after max_ports


def test_spread_same_leaf_is_one_path_and_lost_probes_are_not_a_path():
    learn, _ = stand_in(2, near=True)
    got = spread("a", "b", 1, want=3, learn_fn=learn)
    assert [p.hop for p in got] == [None] * 3
    learn, _ = stand_in(2, silent=set(range(61000, 65536, 3)))
    assert None not in {p.hop for p in spread("a", "b", 1, want=8, learn_fn=learn)}


def test_spread_rejects_nothing_wanted():
    with pytest.raises(ClockfabricError):
        spread("a", "b", 1, want=0, learn_fn=stand_in(2)[0])


def test_round_robin():
    assert round_robin({"x": [1, 2, 3], "y": [4]}, 3) == [Path("x", 1), Path("y", 4), Path("x", 2)]
    assert round_robin({"x": [1]}, 3) == [Path("x", 1)]
    assert round_robin({}, 3) == []


def test_table_expires_and_forgets():
    now = [100.0]
    learn, calls = stand_in(2)
    table = PathTable(want=2, max_age_s=60, learn_fn=learn, clock=lambda: now[0])
    first = table.paths("10.0.0.1", "10.0.0.3", 5000)
    assert len(first) == 2 and table.learned_at("10.0.0.1", "10.0.0.3", 5000) == 100.0
    now[0] += 59
    assert table.paths("10.0.0.1", "10.0.0.3", 5000) is first and len(calls) == 1  # still fresh
    table.paths("10.0.0.1", "10.0.0.5", 5000)
    now[0] += 2
    table.paths("10.0.0.1", "10.0.0.3", 5000)
    assert len(calls) == 3 and table.learned_at("10.0.0.1", "10.0.0.3", 5000) == 161.0  # expired: learned again
    table.forget(dst="10.0.0.5")
    assert table.learned_at("10.0.0.1", "10.0.0.5", 5000) is None
    assert table.learned_at("10.0.0.1", "10.0.0.3", 5000) == 161.0
    table.forget()  # a link event: everything is learned again on next use
    assert table.learned_at("10.0.0.1", "10.0.0.3", 5000) is None
    table.paths("10.0.0.1", "10.0.0.3", 5000)
    assert len(calls) == 4


def test_without_raw_socket_permission_one_clear_error(monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(paths.socket, "socket", refuse)
    with pytest.raises(ClockfabricError, match="root or CAP_NET_RAW") as info:
        paths.learn("10.0.0.1", "10.0.0.3", 5000, sports=[61000])
    assert "\n" not in str(info.value)


def segment(flags: int, ack: int, src: str = "10.0.0.3", dst: str = "10.0.0.1", sport: int = 5000,
            dport: int = 61000) -> bytes:
    """An IPv4 TCP segment from the peer back to the tracing host (checksums left out: not read)."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 0, 0, 64, socket.IPPROTO_TCP, 0, socket.inet_aton(src),
                     socket.inet_aton(dst))
    return ip + struct.pack("!HHIIBBHHH", sport, dport, 777, ack, 5 << 4, flags, 64240, 0, 0)


def test_only_the_peers_answer_to_our_syn_ends_a_trace_not_the_traced_flows_own_segments():
    seqs = {(61000, 5000): 12345}
    assert paths._reply_from_peer(segment(0x12, 12346), "10.0.0.1", "10.0.0.3", seqs) == (61000, 5000)  # SYN-ACK
    assert paths._reply_from_peer(segment(0x14, 12346), "10.0.0.1", "10.0.0.3", seqs) == (61000, 5000)  # RST
    # the live flow's own ACKs and data from the peer: the 5-tuple matches, the probe was never answered
    assert paths._reply_from_peer(segment(0x10, 12346), "10.0.0.1", "10.0.0.3", seqs) is None
    assert paths._reply_from_peer(segment(0x18, 99), "10.0.0.1", "10.0.0.3", seqs) is None
    # a reset of the flow itself, or an answer to another SYN: not acknowledging ours
    assert paths._reply_from_peer(segment(0x14, 99), "10.0.0.1", "10.0.0.3", seqs) is None
    assert paths._reply_from_peer(segment(0x12, 12346, dport=61001), "10.0.0.1", "10.0.0.3", seqs) is None
    assert paths._reply_from_peer(segment(0x12, 12346, src="10.0.0.4"), "10.0.0.1", "10.0.0.3", seqs) is None
    assert paths._reply_from_peer(segment(0x12, 0), "10.0.0.1", "10.0.0.3", {(61000, 5000): 0xFFFFFFFF}) \
        == (61000, 5000)  # the acknowledgement wraps
