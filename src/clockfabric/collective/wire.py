"""The transport's wire: the hello a dialled subflow opens with, the header before each chunk,
the ack that answers it, and reading whole structures off a blocking socket."""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Callable

HELLO = struct.Struct("!4sIHH")  # magic, call token, rank, subflow index
MAGIC = b"CFa2"
HEADER = struct.Struct("!IQIq")  # message number, offset, length, send stamp (ns, synced clock)
PROBE = 0xFFFFFFFF  # the message number of a probe: a header alone, acknowledged at once
RESIZE = 0xFFFFFFFE  # a header alone asking the receiver for a receive buffer of `offset` bytes; not acknowledged
ACK = struct.Struct("!IIq")  # message number, length, one-way delay of the first byte (ns)
PIECE = 1 << 20  # bytes per syscall at most


class Idle(Exception):
    """A kernel timeout with nothing owed: not a failure, just quiet."""


PEER_CLOSED = "the peer closed the connection"


class PeerClosed(ConnectionResetError):
    """The peer closed its end cleanly (end of stream), as it does once it has all it expected."""


def recv_into(sock: socket.socket, view: memoryview, idle_ok: Callable[[], bool], progress=None) -> None:
    """Fill view from sock. A kernel timeout before the first byte raises Idle if idle_ok()."""
    off = 0
    while off < len(view):
        want = min(PIECE, len(view) - off)
        try:
            got = sock.recv_into(view[off:off + want], want, socket.MSG_WAITALL)
        except BlockingIOError:
            if off == 0 and idle_ok():
                raise Idle from None
            raise
        if got == 0:
            raise PeerClosed(errno.ECONNRESET, PEER_CLOSED)
        off += got
        if progress:
            progress()


def recv_exactly(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionResetError(errno.ECONNRESET, "closed during hello")
        data += chunk
    return data
