"""Per-flow TCP readings in, rates out; a flow's key as one label and back.

A flow is a socket, not a 5-tuple: sock_diag's cookie names it, so a port reused by a new
connection starts a new flow (its counters from zero) and never shows as a rate spike or a
negative one. A flow missing from a reading has ended: it is reported once as ended, then
forgotten. Rates need two readings of the same socket. The first gives none (None, not 0),
but for a socket sending flat out as it is read (not application-limited, data sent just now):
it gets the kernel's delivery-rate estimate, which for such a socket is what it moves. A new bulk
flow's load is then reported a reading sooner, before the queue it builds can be blamed on
anything else.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from clockfabric.traffic.steer_decide import FlowKey

FRESH_MS = 100  # data sent this recently: the socket is sending as it is read


@dataclass(frozen=True)
class SocketReading:
    """One sock_diag reading of an established TCP socket, with its tcp_info."""

    key: FlowKey
    inode: int  # the socket's inode: /proc/PID/fd links name it, so it leads to the process
    cookie: int  # the socket's identity
    bytes_acked: int
    bytes_received: int
    retransmits: int  # tcpi_total_retrans: segments retransmitted over the socket's life
    rtt_us: int  # smoothed
    cwnd: int  # segments
    delivery_rate_bps: float  # the kernel's estimate of the recent delivery rate, bits per second
    dscp: int | None = None  # the DSCP the socket marks its packets with, where the kernel says
    last_data_sent_ms: int | None = None  # since the socket last sent data; None: not read
    send_queue_bytes: int = 0  # written by the program, not yet acknowledged: what waits on the network
    app_limited: bool = True  # the delivery-rate estimate was taken while the program sent less than it could
    data_segs_out: int = 0  # segments with a payload sent over the socket's life (tcpi_data_segs_out)
    data_segs_in: int = 0  # and received (tcpi_data_segs_in): the packets in-band sampling chooses from
    wanting_us: int | None = None  # time with data to send, not held by the receiver, over its life (None: unread)

    @property
    def sending_flat_out(self) -> bool:
        return not self.app_limited and self.last_data_sent_ms is not None and self.last_data_sent_ms <= FRESH_MS


@dataclass(frozen=True)
class FlowRates:
    reading: SocketReading
    tx_bps: float | None  # bytes acknowledged by the peer, as bits per second since the last reading
    rx_bps: float | None  # bytes received from it
    new_retransmits: int  # since the last reading
    tx_pps: float | None = None  # segments with a payload sent, a second since the last reading (None: first)
    rx_pps: float | None = None  # and received
    wanting: float | None = None  # the share of the time since the last reading it had data to send

    @property
    def key(self) -> FlowKey:
        return self.reading.key


@dataclass(frozen=True)
class _Last:
    t_s: float
    reading: SocketReading


class FlowTracker:
    """The last reading of each live socket: rates from the next one."""

    def __init__(self) -> None:
        self.last: dict[int, _Last] = {}  # by cookie

    def update(self, readings: Iterable[SocketReading], t_s: float) -> tuple[list[FlowRates], list[FlowKey]]:
        """(each socket of this reading with its rates, the flows that ended since the last one)."""
        out, seen = [], {}
        for r in readings:
            seen[r.cookie] = _Last(t_s, r)
            before = self.last.get(r.cookie)
            if before is None or before.reading.key != r.key or t_s <= before.t_s:
                out.append(FlowRates(r, r.delivery_rate_bps if r.sending_flat_out else None, None, 0))
                continue
            dt = t_s - before.t_s
            was = before.reading
            out.append(FlowRates(r, _rate(r.bytes_acked - was.bytes_acked, dt),
                                 _rate(r.bytes_received - was.bytes_received, dt),
                                 max(0, r.retransmits - was.retransmits),
                                 _per_s(r.data_segs_out - was.data_segs_out, dt),
                                 _per_s(r.data_segs_in - was.data_segs_in, dt),
                                 _share_of(r.wanting_us, was.wanting_us, dt)))
        ended = sorted(last.reading.key for cookie, last in self.last.items() if cookie not in seen)
        self.last = seen
        return out, ended


def _rate(delta_bytes: int, dt_s: float) -> float | None:
    return delta_bytes * 8 / dt_s if delta_bytes >= 0 else None


def _share_of(now_us: int | None, was_us: int | None, dt_s: float) -> float | None:
    if now_us is None or was_us is None or now_us < was_us:
        return None
    return min(1.0, (now_us - was_us) / 1e6 / dt_s)


def _per_s(delta: int, dt_s: float) -> float:
    return delta % 2**32 / dt_s  # the kernel's counts are 32 bits: a wrapped one still gives its step


def flow_label(key: FlowKey) -> str:
    """"10.0.0.1:40000->10.0.1.1:5201": the flow's label value, local end first."""
    return str(key)
