"""Which packets of a flow are timestamped, and how a captured frame is read: trajectory sampling.

Both ends of a flow must pick the same packets with no coordination, so the choice is a hash of
fields the packet keeps end to end: its TCP sequence number (never TTL, checksum or DSCP/ECN,
which change on the way). The sequence number advances by the payload, so its low bits repeat
for a whole flow (1448-byte segments step it by a multiple of 8): a multiplicative hash spreads
every bit into the top ones, and a packet is kept when the top `bits` bits are zero, 1 in
2**bits. A packet is then named by its 4-tuple, sequence number and IP ID: the IP ID tells a
retransmission from the original. Pure ACKs (no payload) repeat a sequence number and are never
kept. The kernel runs the same test as a classic BPF filter (`bpf_program`), so only kept packets
cost a copy to user space.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping
from typing import NamedTuple

HASH_MULTIPLIER = 0x9E3779B1  # Knuth's: 2**32 / the golden ratio, odd
DEFAULT_BITS = 4  # 1 packet in 16
SNAP_BYTES = 128  # Ethernet + the longest IPv4 header (60) + the TCP header's first 20 bytes
ETH_HEADER = 14
ETH_P_IP = 0x0800
IPPROTO_TCP = 6


def selected(seq: int, bits: int = DEFAULT_BITS) -> bool:
    """Whether the packet with this TCP sequence number is sampled (on both ends alike)."""
    return ((seq * HASH_MULTIPLIER) & 0xFFFFFFFF) >> (32 - bits) == 0


class Packet(NamedTuple):
    """A sampled TCP packet, by what it keeps from the sender to the receiver (a tuple: thousands
    a second are made, hashed and matched)."""

    src: str
    sport: int
    dst: str
    dport: int
    seq: int
    ip_id: int

    @property
    def tuple4(self) -> tuple[str, int, str, int]:
        """Its direction of its flow: (source, source port, destination, destination port)."""
        return self.src, self.sport, self.dst, self.dport


# from the Ethernet type on: type, IP version and header length, total length, ID, fragment
# field, protocol, source, destination
HEADERS = struct.Struct("!H B x H H H x B 2x 4s 4s")
TCP_START = struct.Struct("!HHI")  # ports, sequence number


def parse_frame(frame: bytes, bits: int = DEFAULT_BITS) -> Packet | None:
    """An Ethernet frame (or its first SNAP_BYTES) as a sampled packet; None for anything else:
    not IPv4 TCP, a fragment, no payload, or not selected."""
    if len(frame) < ETH_HEADER + 20:
        return None
    ethertype, version_ihl, total, ip_id, frag, proto, src, dst = HEADERS.unpack_from(frame, 12)
    ihl = (version_ihl & 0x0F) * 4
    tcp = ETH_HEADER + ihl
    if ethertype != ETH_P_IP or proto != IPPROTO_TCP or frag & 0x1FFF or ihl < 20 or len(frame) < tcp + 13:
        return None
    sport, dport, seq = TCP_START.unpack_from(frame, tcp)
    if total <= ihl + (frame[tcp + 12] >> 4) * 4 or not selected(seq, bits):
        return None
    return Packet(socket.inet_ntoa(src), sport, socket.inet_ntoa(dst), dport, seq, ip_id)


# classic BPF opcodes (linux/bpf_common.h)
LD_H_ABS, LD_B_ABS, LD_W_IND, LD_B_IND, LDX_MSH = 0x28, 0x30, 0x40, 0x50, 0xB1
ALU_MUL_K, ALU_RSH_K, ALU_LSH_K, ALU_ADD_X = 0x24, 0x74, 0x64, 0x0C
JEQ_K, JSET_K, JGT_X, RET_K, ST, LDX_MEM = 0x15, 0x45, 0x2D, 0x06, 0x02, 0x61  # JGT_X: BPF_JMP | BPF_JGT | BPF_X
KEEP, DROP = "keep", "drop"  # jump targets: the program's last two instructions


MAX_PORT_PAIRS = 200  # a filter naming more flows' ports would jump past the 255 instructions a jump reaches
MAX_BITS = 10  # the sparsest sampling a flow is given: 1 packet in 1024
# (source port, destination port) of the packets wanted -> the bits their sequence numbers are sampled by
PortBits = Mapping[tuple[int, int], int]


def bpf_program(bits: int = DEFAULT_BITS, ports: PortBits | None = None) -> list[tuple[int, int, int, int]]:
    """The kernel's half of `parse_frame`: (code, jump if true, jump if false, k) instructions
    keeping SNAP_BYTES of each IPv4 TCP frame with a payload whose sequence number is selected;
    with `ports`, only those whose port pair is one of them (the job flows': no other packet
    costs a copy), each selected by its own bits (at least `bits`: the packets selected by more
    bits are a subset of those by fewer). At most MAX_PORT_PAIRS; none: nothing kept."""
    keep, drop = KEEP, DROP
    if ports is not None and not ports:
        return [(RET_K, 0, 0, 0)]
    if ports is not None and len(ports) > MAX_PORT_PAIRS:
        raise ValueError(f"{len(ports)} port pairs: a filter takes at most {MAX_PORT_PAIRS}")
    wanted = sorted((sport << 16 | dport, max(bits, b)) for (sport, dport), b in (ports or {}).items())
    prog: list[tuple[int, int | str, int | str, int]] = [
        (LD_H_ABS, 0, 0, 12), (JEQ_K, 0, drop, ETH_P_IP),        # IPv4
        (LD_B_ABS, 0, 0, 23), (JEQ_K, 0, drop, IPPROTO_TCP),     # TCP
        (LD_H_ABS, 0, 0, 20), (JSET_K, drop, 0, 0x1FFF),         # not a fragment
        (LDX_MSH, 0, 0, ETH_HEADER),                             # X = the IP header's length
        (LD_W_IND, 0, 0, ETH_HEADER + 4),                        # A = the sequence number
        (ALU_MUL_K, 0, 0, HASH_MULTIPLIER), (ALU_RSH_K, 0, 0, 32 - bits),
        (JEQ_K, 0, drop, 0),                                     # selected
        (LD_B_IND, 0, 0, ETH_HEADER + 12), (ALU_RSH_K, 0, 0, 4), (ALU_LSH_K, 0, 0, 2),  # A = TCP header length
        (ALU_ADD_X, 0, 0, 0), (ST, 0, 0, 0), (LDX_MEM, 0, 0, 0),  # X = IP + TCP header lengths
        # a payload: the total length beyond them (then the ports, if wanted)
        (LD_H_ABS, 0, 0, ETH_HEADER + 2), (JGT_X, 0 if wanted else keep, drop, 0),
    ]
    labels: dict[str, int] = {}
    if wanted:  # A = the ports (source, destination): one of the wanted pairs, then its own bits
        prog += [(LDX_MSH, 0, 0, ETH_HEADER), (LD_W_IND, 0, 0, ETH_HEADER)]
        prog += [(JEQ_K, keep if b == bits else f"bits{b}", 0 if i < len(wanted) - 1 else drop, pair)
                 for i, (pair, b) in enumerate(wanted)]
        for b in sorted({b for _, b in wanted} - {bits}):  # the sequence number selected by more bits
            labels[f"bits{b}"] = len(prog)
            prog += [(LD_W_IND, 0, 0, ETH_HEADER + 4), (ALU_MUL_K, 0, 0, HASH_MULTIPLIER),
                     (ALU_RSH_K, 0, 0, 32 - b), (JEQ_K, keep, drop, 0)]
    labels |= {KEEP: len(prog), DROP: len(prog) + 1}

    def jump(target: int | str, at: int) -> int:
        """A label as the kernel's relative jump from instruction `at`."""
        return target if isinstance(target, int) else labels[target] - at - 1

    out = [(code, jump(jt, at), jump(jf, at), k) for at, (code, jt, jf, k) in enumerate(prog)]
    assert all(jt <= 255 and jf <= 255 for _, jt, jf, _ in out), "a jump past a jump's reach"
    return [*out, (RET_K, 0, 0, SNAP_BYTES), (RET_K, 0, 0, 0)]


def run_bpf(program: list[tuple[int, int, int, int]], frame: bytes) -> int:
    """What the kernel's interpreter returns for `frame` (bytes kept; 0: dropped), for the
    opcodes bpf_program uses: the tests hold the filter to parse_frame with it."""
    a = x = pc = 0
    mem = [0] * 16
    while True:
        code, jt, jf, k = program[pc]
        pc += 1
        if code == RET_K:
            return k
        if code in (LD_H_ABS, LD_B_ABS, LD_W_IND, LD_B_IND):
            off = k + (x if code in (LD_W_IND, LD_B_IND) else 0)
            size = {LD_H_ABS: 2, LD_B_ABS: 1, LD_W_IND: 4, LD_B_IND: 1}[code]
            if off + size > len(frame):
                return 0
            a = int.from_bytes(frame[off:off + size], "big")
        elif code == LDX_MSH:
            x = (frame[k] & 0x0F) * 4 if k < len(frame) else 0
        elif code == ST:
            mem[k] = a
        elif code == LDX_MEM:
            x = mem[k]
        elif code == ALU_MUL_K:
            a = (a * k) & 0xFFFFFFFF
        elif code == ALU_RSH_K:
            a >>= k
        elif code == ALU_LSH_K:
            a = (a << k) & 0xFFFFFFFF
        elif code == ALU_ADD_X:
            a = (a + x) & 0xFFFFFFFF
        else:
            taken = {JEQ_K: a == k, JSET_K: bool(a & k), JGT_X: a > x}[code]
            pc += jt if taken else jf
