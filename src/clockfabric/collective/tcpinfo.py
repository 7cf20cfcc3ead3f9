"""What the kernel knows of a TCP connection, and the socket options the transport sets on it:
the delivery rate and sending counters from struct tcp_info, a fixed receive buffer, the
congestion control."""

from __future__ import annotations

import socket
import struct
from dataclasses import astuple, dataclass

TCP_INFO_LEN = 168  # struct tcp_info up to tcpi_delivery_rate (Linux 4.9+)
TCP_CHRONO_LEN = 192  # ... and on to the chrono stats: busy, rwnd- and sndbuf-limited time (Linux 4.10+)
TCP_DSACK_LEN = 220  # ... and on to tcpi_dsack_dups (Linux 5.4+)
# Loss-based CUBIC, Linux's own default, where the kernel lets us choose: lab namespaces inherit
# the machine's default, and BBR there left some flows at 0.2-0.6 of a shaped link's rate where
# CUBIC holds 0.89-0.93 (docs/notes/2026-11-23-contention.md). Without CAP_NET_ADMIN the kernel's default stays.
CONGESTION = b"cubic"
# a window under a few segments stalls on delayed acks: at the lowest ratio (fixed_rcvbuf) 8 KiB
# offers about three
MIN_RCVBUF = 8 << 10


def _tcp_info(sock: socket.socket, length: int) -> bytes | None:
    """The first `length` bytes of the connection's struct tcp_info; None where the kernel
    gives fewer (too old) or none (closed)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, length)
    except OSError:
        return None
    return info if len(info) >= length else None


def delivery_rate(sock: socket.socket) -> float | None:
    """The kernel's delivery-rate estimate for a TCP connection, bytes per ns; None while it
    is app-limited (it then measures our sending, not the path) or unknown."""
    info = _tcp_info(sock, TCP_INFO_LEN)
    if info is None or info[7] & 1:  # tcpi_delivery_rate_app_limited
        return None
    return struct.unpack_from("Q", info, 160)[0] / 1e9 or None  # tcpi_delivery_rate, bytes/s


@dataclass(frozen=True)
class TcpCounters:
    """A connection's sending, as the kernel counts it since it opened: time (µs) with data
    in flight (busy), and the part of it that the receive window or the send buffer held
    back; the rest the congestion window held. retrans: segments sent again; spurious: of
    those, the ones the receiver already had (it says so with a D-SACK): tail-loss probes and
    timeouts fired while the acks were only late, not losses."""

    busy_us: int = 0
    rwnd_limited_us: int = 0
    sndbuf_limited_us: int = 0
    retrans: int = 0
    spurious: int = 0

    def __add__(self, other: TcpCounters) -> TcpCounters:
        return TcpCounters(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def __sub__(self, other: TcpCounters) -> TcpCounters:
        return TcpCounters(*(a - b for a, b in zip(astuple(self), astuple(other), strict=True)))

    @property
    def cwnd_limited_us(self) -> int:
        return max(0, self.busy_us - self.rwnd_limited_us - self.sndbuf_limited_us)

    @property
    def losses(self) -> int:
        """Segments sent again that the receiver had not had: lost on the way."""
        return max(0, self.retrans - self.spurious)


def tcp_counters(sock: socket.socket) -> TcpCounters | None:
    """The kernel's counters for a TCP connection; None where it keeps none (closed, too old a kernel)."""
    info = _tcp_info(sock, TCP_DSACK_LEN) or _tcp_info(sock, TCP_CHRONO_LEN)
    if info is None:
        return None
    busy, rwnd, sndbuf = struct.unpack_from("QQQ", info, 168)
    retrans = struct.unpack_from("I", info, 100)[0]  # tcpi_total_retrans
    spurious = struct.unpack_from("I", info, 216)[0] if len(info) >= TCP_DSACK_LEN else 0  # tcpi_dsack_dups
    return TcpCounters(busy, rwnd, sndbuf, retrans, spurious)


def fixed_rcvbuf(sock: socket.socket, size: int) -> None:
    """Fix the connection's receive window at no more than `size` bytes: a buffer (SO_RCVBUF,
    which turns autotuning off) that the kernel's doubling makes `size`.

    Linux advertises the doubled buffer times the payload-to-memory ratio of the segments it has
    received (`scaling_ratio`, under one), and that ratio moves with the path and the load (0.63
    idle and 0.84 loaded on the lab's subflows). A buffer of `size` itself would let the window
    reach near twice it; the window clamp (TCP_WINDOW_CLAMP) does not hold it, since Linux resets
    the clamp from the buffer each time the ratio moves, a packet at a time. The doubled buffer
    is the one bound the kernel keeps: the window runs from about half `size` to `size`."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, (size + 1) // 2)


def prefer_congestion(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, CONGESTION)
    except OSError:  # not built in, or not permitted here: the kernel's default it is
        pass


def congestion(sock: socket.socket) -> str:
    """The congestion control a connection runs."""
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode()
    except OSError:
        return ""
