"""IPv4 addresses of NICs from one netlink dump (RTM_GETADDR), with the standard library only.

Addresses do not live in sysfs. pyroute2 reads them too, but importing it costs a host's
report about 0.2 s of CPU, and a Slurm prolog waits on that report.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator

RTM_GETADDR, RTM_NEWADDR = 22, 20
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
IFA_ADDRESS, IFA_LOCAL = 1, 2
HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
IFADDR = struct.Struct("=BBBBI")  # ifaddrmsg: family, prefix length, flags, scope, interface index
ATTR = struct.Struct("=HH")  # rtattr: length, type


def _align(n: int) -> int:
    return (n + 3) & ~3


def ipv4(names: list[str]) -> dict[str, list[str]]:
    """'a.b.c.d/len' of each of `names` present in this process's network namespace."""
    by_index = {}
    for name in names:
        try:
            by_index[socket.if_nametoindex(name)] = name
        except OSError:
            continue  # not in this namespace: left out, as a missing NIC
    out: dict[str, list[str]] = {name: [] for name in by_index.values()}
    if not by_index:
        return out
    for index, prefix, attrs in _dump():
        if (owner := by_index.get(index)) is not None:
            # IFA_LOCAL is our end; IFA_ADDRESS is the peer's on a point-to-point link
            addr = attrs.get(IFA_LOCAL) or attrs.get(IFA_ADDRESS)
            if addr is not None:
                out[owner].append(f"{socket.inet_ntoa(addr)}/{prefix}")
    return out


def _dump() -> Iterator[tuple[int, int, dict[int, bytes]]]:
    """(interface index, prefix length, attributes) of every IPv4 address."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        body = IFADDR.pack(socket.AF_INET, 0, 0, 0, 0)
        sock.sendall(HEADER.pack(HEADER.size + len(body), RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + body)
        while True:
            data = sock.recv(65536)
            for kind, payload in messages(data):
                if kind == NLMSG_DONE:
                    return
                if kind == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", payload)[0]
                    raise OSError(code, f"netlink address dump: {os.strerror(code)}")
                if kind == RTM_NEWADDR:
                    family, prefix, _, _, index = IFADDR.unpack_from(payload)
                    if family == socket.AF_INET:
                        yield index, prefix, attributes(payload[IFADDR.size:])


def messages(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(type, payload) of each netlink message in one datagram."""
    at = 0
    while at + HEADER.size <= len(data):
        length, kind, _, _, _ = HEADER.unpack_from(data, at)
        if length < HEADER.size:
            return  # malformed: nothing after it can be framed
        yield kind, data[at + HEADER.size:at + length]
        at += _align(length)


def attributes(data: bytes) -> dict[int, bytes]:
    """Route attributes by type (the first of each)."""
    found: dict[int, bytes] = {}
    at = 0
    while at + ATTR.size <= len(data):
        length, kind = ATTR.unpack_from(data, at)
        if length < ATTR.size:
            break
        found.setdefault(kind, data[at + ATTR.size:at + length])
        at += _align(length)
    return found
