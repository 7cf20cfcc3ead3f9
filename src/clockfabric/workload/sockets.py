"""The host's established TCP sockets with their tcp_info, as the workload monitor reads them:
straight off a NETLINK_SOCK_DIAG socket, one dump request, the replies parsed with struct, only
the tcp_info fields flows need.

Why not pyroute2's DiagSocket (traffic/steer_kernel.FlowReader, which steering uses): the agent
reads this every second on every host, and pyroute2 runs each request through an asyncio loop
and parses every attribute of every reply: half the CPU of a read (1 ms of 2 here, with the
kernel's dump the rest). A netlink socket reads the network namespace it was made in, from any
thread.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from collections.abc import Iterator

from clockfabric.traffic.steer_decide import FlowKey
from clockfabric.workload.flows import SocketReading

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCP_ESTABLISHED = 1
INET_DIAG_INFO, INET_DIAG_TOS = 2, 5
NLMSG = struct.Struct("=IHHII")  # length, type, flags, seq, pid
REQUEST = struct.Struct("=BBBxI48x")  # family, protocol, extensions, pad, states, an empty socket id
# inet_diag_msg: family, state, timer, retrans; socket id (ports big-endian, two 16-byte
# addresses, interface, cookie); expires, rqueue, wqueue, uid, inode
DIAG_MSG = struct.Struct("=BBBB2H16s16sIQIIIII")
RTATTR = struct.Struct("=HH")
# tcp_info fields by their offsets (linux/tcp.h, stable since 4.9)
U32, U64 = struct.Struct("=I"), struct.Struct("=Q")
TCPI_FLAGS, TCPI_LAST_DATA_SENT = 7, 44  # flags: bit 0, tcpi_delivery_rate_app_limited
TCPI_RTT, TCPI_SND_CWND, TCPI_TOTAL_RETRANS = 68, 80, 100
TCPI_BYTES_ACKED, TCPI_BYTES_RECEIVED, TCPI_DELIVERY_RATE = 120, 128, 160
TCPI_DATA_SEGS_IN, TCPI_DATA_SEGS_OUT = 152, 156
# time with data to send (busy, whatever held it), and the part the receiver's window held (4.10)
TCPI_BUSY_TIME, TCPI_RWND_LIMITED = 168, 176
RECV_BYTES = 1 << 16


def _align(n: int) -> int:
    return (n + 3) & ~3


class KernelSockets:
    """Call it for a reading of the established IPv4 TCP sockets of the namespace it was made in."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
        self.sock.bind((0, 0))
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def __call__(self) -> list[SocketReading]:
        self.seq += 1
        extensions = 1 << (INET_DIAG_INFO - 1) | 1 << (INET_DIAG_TOS - 1)
        body = REQUEST.pack(socket.AF_INET, socket.IPPROTO_TCP, extensions, 1 << TCP_ESTABLISHED)
        self.sock.send(NLMSG.pack(NLMSG.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP,
                                  self.seq, 0) + body)
        out: list[SocketReading] = []
        while True:
            data = self.sock.recv(RECV_BYTES)
            for kind, msg in _messages(data, self.seq):
                if kind == NLMSG_DONE:
                    return out
                if kind == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", msg)[0]
                    if code:
                        raise OSError(code, f"sock_diag: {os.strerror(code)}")
                    continue
                if kind == SOCK_DIAG_BY_FAMILY and (reading := parse(msg)) is not None:
                    out.append(reading)


def _messages(data: bytes, seq: int) -> Iterator[tuple[int, memoryview]]:
    """(type, payload) of each netlink message of this request in one datagram."""
    view, at = memoryview(data), 0
    while at + NLMSG.size <= len(data):
        length, kind, _flags, msg_seq, _pid = NLMSG.unpack_from(data, at)
        if length < NLMSG.size:
            return
        if msg_seq == seq:
            yield kind, view[at + NLMSG.size:at + length]
        at += _align(length)


def parse(msg: memoryview | bytes) -> SocketReading | None:
    """One inet_diag reply as a reading; None without a tcp_info long enough to read."""
    (_family, _state, _timer, _retrans, sport, dport, src, dst, _ifindex, cookie,
     _expires, _rqueue, wqueue, _uid, inode) = DIAG_MSG.unpack_from(msg)
    info, tos = None, None
    at = _align(DIAG_MSG.size)
    while at + RTATTR.size <= len(msg):
        length, kind = RTATTR.unpack_from(msg, at)
        if length < RTATTR.size:
            break
        value = msg[at + RTATTR.size:at + length]
        if kind == INET_DIAG_INFO:
            info = value
        elif kind == INET_DIAG_TOS and len(value):
            tos = value[0]
        at += _align(length)
    if info is None or len(info) < TCPI_DELIVERY_RATE + U64.size:
        return None
    key = FlowKey(str(ipaddress.IPv4Address(bytes(src[:4]))), socket.ntohs(sport),
                  str(ipaddress.IPv4Address(bytes(dst[:4]))), socket.ntohs(dport))
    u32, u64 = (lambda at: U32.unpack_from(info, at)[0]), (lambda at: U64.unpack_from(info, at)[0])
    return SocketReading(key, inode, cookie, u64(TCPI_BYTES_ACKED), u64(TCPI_BYTES_RECEIVED), u32(TCPI_TOTAL_RETRANS),
                         u32(TCPI_RTT), u32(TCPI_SND_CWND), u64(TCPI_DELIVERY_RATE) * 8.0,
                         None if tos is None else tos >> 2, last_data_sent_ms=u32(TCPI_LAST_DATA_SENT),
                         app_limited=bool(info[TCPI_FLAGS] & 1), send_queue_bytes=wqueue,
                         data_segs_out=u32(TCPI_DATA_SEGS_OUT), data_segs_in=u32(TCPI_DATA_SEGS_IN),
                         wanting_us=_wanting_us(info))


def _wanting_us(info: memoryview | bytes) -> int | None:
    """The socket's time with data to send that the network or its own send buffer held (the
    receiver's window left out), over its life, microseconds; None where the kernel is older."""
    if len(info) < TCPI_RWND_LIMITED + U64.size:
        return None
    return max(0, U64.unpack_from(info, TCPI_BUSY_TIME)[0] - U64.unpack_from(info, TCPI_RWND_LIMITED)[0])
