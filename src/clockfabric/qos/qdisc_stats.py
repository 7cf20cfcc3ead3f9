"""Every qdisc's byte counter and backlog in this network namespace, in one netlink dump a
reading: RTM_GETQDISC read on a raw socket, with only the few attributes that hold them decoded.
The QoS loop reads the hosts' egress queues ten times a second; pyroute2 decodes every attribute
of every message and (0.9) runs an event loop for each call, which made the reading most of the
QoS service's CPU."""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Iterator
from typing import NamedTuple

RTM_NEWQDISC, RTM_GETQDISC = 36, 38
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
TCA_STATS2 = 7
TCA_STATS_BASIC, TCA_STATS_QUEUE = 1, 3
_HDR = struct.Struct("=IHHII")  # nlmsghdr
_TCMSG = struct.Struct("=BxxxiIII")  # tcmsg: family, ifindex, handle, parent, info
_ATTR = struct.Struct("=HH")
_BYTES = struct.Struct("=Q")  # gnet_stats_basic: bytes (u64), packets
_BACKLOG = struct.Struct("=4xI")  # gnet_stats_queue: qlen, backlog, ...


class QdiscStat(NamedTuple):
    ifindex: int  # the interface
    handle: int
    parent: int
    sent_bytes: int
    backlog_bytes: int


def _attrs(data: bytes, off: int, end: int) -> Iterator[tuple[int, int, int]]:
    while off + _ATTR.size <= end:
        length, kind = _ATTR.unpack_from(data, off)
        if length < _ATTR.size:
            return
        yield kind & 0x3FFF, off + _ATTR.size, off + length  # the nested and byte-order flags off
        off += (length + 3) & ~3


def parse(data: bytes) -> tuple[list[QdiscStat], bool]:
    """The qdiscs in one datagram of the dump's answer, and whether it was the last."""
    out: list[QdiscStat] = []
    off = 0
    while off + _HDR.size <= len(data):
        length, kind, _, _, _ = _HDR.unpack_from(data, off)
        if length < _HDR.size:
            break
        if kind == NLMSG_DONE:
            return out, True
        if kind == NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", data, off + _HDR.size)
            raise OSError(-code, f"RTM_GETQDISC: {errno.errorcode.get(-code, str(-code))}")
        if kind == RTM_NEWQDISC:
            _, index, handle, parent, _ = _TCMSG.unpack_from(data, off + _HDR.size)
            sent = backlog = None
            for a, start, stop in _attrs(data, off + _HDR.size + _TCMSG.size, off + length):
                if a == TCA_STATS2:
                    for s, s_start, s_stop in _attrs(data, start, stop):
                        if s == TCA_STATS_BASIC and s_stop - s_start >= _BYTES.size:
                            (sent,) = _BYTES.unpack_from(data, s_start)
                        elif s == TCA_STATS_QUEUE and s_stop - s_start >= _BACKLOG.size:
                            (backlog,) = _BACKLOG.unpack_from(data, s_start)
            if sent is not None and backlog is not None:
                out.append(QdiscStat(index, handle, parent, sent, backlog))
        off += (length + 3) & ~3
    return out, False


class QdiscReader:
    """One raw rtnetlink socket, in the namespace it was made in."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.bind((0, 0))
        self.sock.settimeout(1.0)
        self.seq = 0

    def read(self) -> list[QdiscStat]:
        """Every qdisc of every interface; OSError if the kernel refuses or does not answer."""
        self.seq += 1
        request = _TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        self.sock.send(_HDR.pack(_HDR.size + len(request), RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0)
                       + request)
        out: list[QdiscStat] = []
        while True:
            data = self.sock.recv(1 << 16)
            if _HDR.unpack_from(data)[3] != self.seq:  # an answer to an earlier request, timed out
                continue
            got, done = parse(data)
            out += got
            if done:
                return out

    def close(self) -> None:
        self.sock.close()
