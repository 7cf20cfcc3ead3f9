"""The sampled packets of a host's NICs with their kernel timestamps: one AF_PACKET socket per NIC,
the sampling filter (inband.bpf_program) attached, SO_TIMESTAMPNS for the time the kernel saw
each packet, leaving (PACKET_OUTGOING) or arriving (PACKET_HOST).

Why AF_PACKET and classic BPF rather than an eBPF program on tc: it needs no compiler, no BPF
maps and no capabilities beyond a raw socket, and its cost is a few instructions per packet in
the kernel for the packets it drops, one copy of 128 bytes for the 1 in 2**bits it keeps.
Reading is non-blocking: `drain()` takes what has come, from the agent's main loop.
"""

from __future__ import annotations

import ctypes
import socket
import struct
import time
from collections.abc import Iterable

from clockfabric.workload.inband import DEFAULT_BITS, SNAP_BYTES, Packet, bpf_program, parse_frame

ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26
SO_TIMESTAMPNS = 35  # its control message type (SCM_TIMESTAMPNS) is the same number
PACKET_HOST, PACKET_OUTGOING = 0, 4
RECV_BUFFER = 4 << 20  # a few seconds of samples at the fastest flows: the loop reads them in time
TIMESPEC = struct.Struct("@qq")


def attach_filter(sock: socket.socket, program: list[tuple[int, int, int, int]]) -> None:
    code = b"".join(struct.pack("@HBBI", *ins) for ins in program)
    buf = ctypes.create_string_buffer(code)
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack("@HP", len(program), ctypes.addressof(buf)))


class Capture:
    """Sampled packets of `nics`, as (packet, "tx" | "rx", kernel time in real-clock ns)."""

    def __init__(self, nics: Iterable[str], bits: int = DEFAULT_BITS):
        self.bits = bits
        self.sockets: list[socket.socket] = []
        self.kept = 0  # sampled packets read
        self.cpu_s = 0.0  # this process's time spent reading them
        try:
            for nic in nics:
                self.sockets.append(self._open(nic))
        except OSError:
            self.close()
            raise

    def _open(self, nic: str) -> socket.socket:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        attach_filter(sock, bpf_program(self.bits))
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)
        sock.bind((nic, ETH_P_ALL))
        sock.setblocking(False)
        return sock

    def drain(self) -> list[tuple[Packet, str, int]]:
        t0 = time.thread_time()
        out = []
        for sock in self.sockets:
            while True:
                try:
                    frame, ancillary, _flags, address = sock.recvmsg(SNAP_BYTES, socket.CMSG_SPACE(TIMESPEC.size))
                except BlockingIOError:
                    break
                side = {PACKET_OUTGOING: "tx", PACKET_HOST: "rx"}.get(address[2])
                # frames that came before the filter was attached are tested again here
                if side is None or (packet := parse_frame(frame, self.bits)) is None:
                    continue
                for level, kind, data in ancillary:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                        sec, nsec = TIMESPEC.unpack(data[:TIMESPEC.size])
                        out.append((packet, side, sec * 10**9 + nsec))
        self.kept += len(out)
        self.cpu_s += time.thread_time() - t0
        return out

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
        self.sockets = []
