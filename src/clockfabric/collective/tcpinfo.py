"""What the kernel knows of a TCP connection, and the socket options the transport sets on it:
the delivery rate and sending counters from struct tcp_info, a fixed receive buffer, the
congestion control."""

from __future__ import annotations

import socket
import struct
from dataclasses import astuple, dataclass

TCP_INFO_LEN = 168  # struct tcp_info up to tcpi_delivery_rate (Linux 4.9+)
TCP_CHRONO_LEN = 192  # ... and on to the chrono stats: busy, rwnd- and sndbuf-limited time (Linux 4.10+)
# Loss-based CUBIC, Linux's own default, where the kernel lets us choose: lab namespaces inherit
# the machine's default, and BBR there left some flows at 0.2-0.6 of a shaped link's rate where
# CUBIC holds 0.89-0.93 (docs/notes/2026-11-23-contention.md). Without CAP_NET_ADMIN the kernel's default stays.
CONGESTION = b"cubic"
MIN_RCVBUF = 4096  # a receive buffer under a few segments would stall on delayed acks


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
    back; the rest the congestion window held. retrans: segments sent again."""

    busy_us: int = 0
    rwnd_limited_us: int = 0
    sndbuf_limited_us: int = 0
    retrans: int = 0

    def __add__(self, other: TcpCounters) -> TcpCounters:
        return TcpCounters(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def __sub__(self, other: TcpCounters) -> TcpCounters:
        return TcpCounters(*(a - b for a, b in zip(astuple(self), astuple(other), strict=True)))

    @property
    def cwnd_limited_us(self) -> int:
        return max(0, self.busy_us - self.rwnd_limited_us - self.sndbuf_limited_us)


def tcp_counters(sock: socket.socket) -> TcpCounters | None:
    """The kernel's counters for a TCP connection; None where it keeps none (closed, too old a kernel)."""
    info = _tcp_info(sock, TCP_CHRONO_LEN)
    if info is None:
        return None
    busy, rwnd, sndbuf = struct.unpack_from("QQQ", info, 168)
    return TcpCounters(busy, rwnd, sndbuf, struct.unpack_from("I", info, 100)[0])  # tcpi_total_retrans


def fixed_rcvbuf(sock: socket.socket, size: int) -> None:
    """Fix the connection's receive window at `size` bytes: the buffer (SO_RCVBUF, which turns
    autotuning off; the kernel doubles it) and the window clamp (TCP_WINDOW_CLAMP).

    The buffer alone does not fix the window: Linux advertises the buffer times the payload-to-
    memory ratio of the segments it has received, and that ratio moves with the path and the
    load (at 96 KiB a lab subflow's window read 124 KiB on an idle machine, 165 KiB on a busy
    one, 173 KiB on a bare veth pair). Doubled, the buffer holds `size` bytes of payload at any
    ratio over one half, so the clamp is what binds. Linux resets the clamp from the buffer
    when the ratio moves: the receiver calls hold_window after each chunk it reads."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
    hold_window(sock, size)


def hold_window(sock: socket.socket, size: int) -> None:
    """Clamp the window the connection advertises at `size` bytes, again if the kernel moved the
    clamp (fixed_rcvbuf). A window advertised already is not taken back: it closes as data comes."""
    try:
        if sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP) != size:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, size)
    except OSError:  # closed: its reader learns that on its next read
        pass


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
