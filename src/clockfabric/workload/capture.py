"""The sampled packets of a host's NICs with their kernel timestamps: one AF_PACKET socket per NIC,
the sampling filter (inband.bpf_program) attached, its kept packets written by the kernel into a
TPACKET_V3 ring shared with us (PACKET_RX_RING, mmap), each with the time the kernel saw it and
whether it was leaving (PACKET_OUTGOING) or arriving (PACKET_HOST).

Why AF_PACKET and classic BPF rather than an eBPF program on tc: it needs no compiler, no BPF
maps and no capabilities beyond a raw socket, and its cost is a few instructions per packet in
the kernel for the packets it drops. The filter names the job flows' port pairs, each direction
sampled by its own bits (`only()`, each update, re-attached when they change): the packets of
other flows are dropped there too, and a host with no job flow copies none.

Why a ring rather than a recvmsg per kept packet: a read then is a syscall, a frame, its address
and its control messages made into Python objects, about 20 us a packet. Into the ring the
kernel writes blocks of frames, each handed over whole once full or `RETIRE_MS` old, so
`drain()` (once an update) walks the blocks handed over, reads each frame's header and first
bytes, and gives each block back: no syscall at all. The ring holds RING_BYTES a NIC (~9,000
frames of ~220 bytes: an update's samples with room to spare at ~50 a flow direction a second);
a frame the kernel finds no room for is dropped, counted in `dropped()`.
"""

from __future__ import annotations

import ctypes
import mmap
import socket
import struct
from collections.abc import Iterable

from clockfabric.workload.inband import (
    DEFAULT_BITS,
    MAX_PORT_PAIRS,
    SNAP_BYTES,
    Packet,
    PortBits,
    bpf_program,
    parse_frame,
)

ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26
SO_TIMESTAMPNS = 35  # turns on the kernel's packet timestamps, which the ring's headers carry
SOL_PACKET, PACKET_RX_RING, PACKET_STATISTICS, PACKET_VERSION = 263, 5, 6, 10
TPACKET_V3 = 2
PACKET_HOST, PACKET_OUTGOING = 0, 4
BLOCK_BYTES, BLOCKS = 1 << 17, 16  # 128 KiB blocks (a multiple of the page), 2 MiB a NIC
RING_BYTES = BLOCK_BYTES * BLOCKS
FRAME_BYTES = 128 + SNAP_BYTES  # a kept frame at most: its header and address (80, aligned), its bytes
RETIRE_MS = 100  # a block not yet full is handed over this long after its first frame
TP_STATUS_KERNEL, TP_STATUS_USER = 0, 1
# tpacket_req3: block size, blocks, frame size, frames, retire timeout (ms), private bytes, features
REQ3 = struct.Struct("@IIIIIII")
# tpacket_block_desc: version, offset to private; tpacket_hdr_v1: status, packets, offset to the first
BLOCK = struct.Struct("@IIIII")
# tpacket3_hdr: offset to the next, seconds, nanoseconds, bytes kept, bytes on the wire, status, MAC offset
FRAME = struct.Struct("@IIIIIIH")
PKTTYPE_AT = 48 + 10  # sockaddr_ll (after the 48-byte header, aligned): its sll_pkttype
SIDES = {PACKET_OUTGOING: "tx", PACKET_HOST: "rx"}


def attach_filter(sock: socket.socket, program: list[tuple[int, int, int, int]]) -> None:
    code = b"".join(struct.pack("@HBBI", *ins) for ins in program)
    buf = ctypes.create_string_buffer(code)
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack("@HP", len(program), ctypes.addressof(buf)))


class Ring:
    """One NIC's AF_PACKET socket and its TPACKET_V3 ring."""

    def __init__(self, nic: str, program: list[tuple[int, int, int, int]]):
        # protocol 0: no frame reaches the socket before its bind, when the filter and ring are in place
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            attach_filter(self.sock, program)
            self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self.sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V3)
            self.sock.setsockopt(SOL_PACKET, PACKET_RX_RING, REQ3.pack(
                BLOCK_BYTES, BLOCKS, FRAME_BYTES, RING_BYTES // FRAME_BYTES, RETIRE_MS, 0, 0))
            self.map = mmap.mmap(self.sock.fileno(), RING_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self.sock.bind((nic, ETH_P_ALL))
        except OSError:
            self.sock.close()
            raise
        self.next_block = 0  # the kernel hands blocks over in order

    def frames(self) -> Iterable[tuple[bytes, int, int]]:
        """The frames of the blocks handed over since the last call: (frame's first bytes, packet
        type, kernel real-clock ns); each block given back once read."""
        buf = self.map
        while True:
            base = self.next_block * BLOCK_BYTES
            _version, _priv, status, count, offset = BLOCK.unpack_from(buf, base)
            if not status & TP_STATUS_USER:
                return
            at = base + offset
            for _ in range(count):
                next_offset, sec, nsec, snaplen, _wire, _status, mac = FRAME.unpack_from(buf, at)
                yield buf[at + mac:at + mac + snaplen], buf[at + PKTTYPE_AT], sec * 10**9 + nsec
                at += next_offset
            struct.pack_into("@I", buf, base + 8, TP_STATUS_KERNEL)  # the block is the kernel's again
            self.next_block = (self.next_block + 1) % BLOCKS

    def dropped(self) -> int:
        """Frames the kernel dropped since the last call (the ring full), from PACKET_STATISTICS."""
        _packets, drops = struct.unpack("@II", self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        return drops

    def close(self) -> None:
        self.map.close()
        self.sock.close()


class Capture:
    """Sampled packets of `nics`, as (packet, "tx" | "rx", kernel time in real-clock ns)."""

    def __init__(self, nics: Iterable[str], bits: int = DEFAULT_BITS):
        self.bits = bits
        self.rings: list[Ring] = []
        self.kept = 0  # sampled packets read
        self.ports: dict[tuple[int, int], int] | None = None  # the port pairs the filter keeps, their bits (None: any)
        try:
            for nic in nics:
                self.rings.append(Ring(nic, bpf_program(bits)))
        except OSError:
            self.close()
            raise

    def drain(self) -> list[tuple[Packet, str, int]]:
        out = []
        # frames the ring took before the last `only` passed the filter of their time: held to this one
        ports = self.ports
        for ring in self.rings:
            for frame, pkttype, real_ns in ring.frames():
                side = SIDES.get(pkttype)
                if side is not None and (packet := parse_frame(frame, self.bits)) is not None and (
                        ports is None or (packet.sport, packet.dport) in ports):
                    out.append((packet, side, real_ns))
        self.kept += len(out)
        return out

    def only(self, ports: PortBits) -> None:
        """Keep only packets of these (source port, destination port) pairs, each sampled by its
        bits: the job flows' directions; past MAX_PORT_PAIRS any (then parsing drops the others)."""
        wanted = dict(ports) if len(ports) <= MAX_PORT_PAIRS else None
        if wanted != self.ports:
            program = bpf_program(self.bits, wanted)
            for ring in self.rings:
                attach_filter(ring.sock, program)  # replaces the last one at once
            self.ports = wanted

    def dropped(self) -> int:
        """Sampled packets the kernel had no room for since the last call."""
        return sum(ring.dropped() for ring in self.rings)

    def close(self) -> None:
        for ring in self.rings:
            ring.close()
        self.rings = []
