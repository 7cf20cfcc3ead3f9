"""In-band one-way delays from sampled packets: a packet's record where it left the sender and
its record where it reached the receiver, matched, give its delay; per flow and direction, a
window's min, p50 and p99.

Records come from both ends (the agent's own captures and its peers' messages), each with its
time on the global clock when its host is synced. A delay is only taken from two synced
records: an end without a clock mapping makes none (its flow falls back to RTT/2, marked as
such), never a false one. A record waits `hold_ns` for its other half, then is forgotten: a
packet lost on the way, or one only one end saw, costs nothing more. A packet is named by its
4-tuple, sequence number and IP ID, so a port reused by a new connection (a new initial
sequence number) never matches the old one's records. Pure: records and times come in.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from clockfabric.workload.inband import Packet

TX, RX = "tx", "rx"  # where a record was taken: leaving the sender, reaching the receiver
HOLD_NS = 5 * 10**9  # a record's wait for its other half: a peer's records come an update or two later
MAX_WAITING = 200_000  # records waiting at most (~40 MB): past it new ones are dropped, not the host's memory
INBAND, FALLBACK = "inband", "rtt/2"
Tuple4 = tuple[str, int, str, int]


class Record(NamedTuple):
    """A sampled packet where one end saw it (a tuple: thousands a second are made and matched)."""

    packet: Packet
    side: str  # TX | RX
    t_ns: int  # global time when `synced`, else the host's own clock
    synced: bool


def _percentile(ordered: list[int], q: float) -> int:
    """Nearest rank: a value that was measured, never one between two."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True)
class OwdStats:
    """One flow direction over one window: in-band, or RTT/2 where no delay could be measured."""

    min_ns: int
    p50_ns: int
    p99_ns: int
    samples: int
    source: str  # INBAND | FALLBACK

    @classmethod
    def of(cls, delays: list[int]) -> OwdStats:
        ordered = sorted(delays)
        return cls(ordered[0], _percentile(ordered, 0.5), _percentile(ordered, 0.99), len(ordered), INBAND)

    @classmethod
    def fallback(cls, rtt_us: float) -> OwdStats:
        half = round(rtt_us * 1000 / 2)
        return cls(half, half, half, 0, FALLBACK)

    def as_dict(self) -> dict:
        return {"min_ns": self.min_ns, "p50_ns": self.p50_ns, "p99_ns": self.p99_ns, "samples": self.samples,
                "source": self.source}


class Matcher:
    """Records of both sides, matched by packet; each match's delay kept by direction until the
    window closes."""

    def __init__(self, hold_ns: int = HOLD_NS, max_waiting: int = MAX_WAITING):
        self.hold_ns = hold_ns
        self.max_waiting = max_waiting
        self.dropped = 0  # records turned away while `max_waiting` were waiting
        self.waiting: dict[tuple[Packet, str], tuple[Record, int]] = {}  # (packet, side) -> (record, when it came)
        self.delays: dict[Tuple4, list[int]] = defaultdict(list)
        self.unsynced = 0  # matches this window that made no delay: an end not synced

    def add(self, records: Iterable[Record], now_ns: int) -> int:
        """Take records; returns how many matched one of the other side."""
        matched = 0
        for r in records:
            other = self.waiting.pop((r.packet, RX if r.side == TX else TX), None)
            if other is None:
                if len(self.waiting) < self.max_waiting:
                    self.waiting.setdefault((r.packet, r.side), (r, now_ns))  # a duplicate keeps the first
                else:
                    self.dropped += 1
                continue
            matched += 1
            tx, rx = (r, other[0]) if r.side == TX else (other[0], r)
            if tx.synced and rx.synced:
                self.delays[r.packet.tuple4].append(rx.t_ns - tx.t_ns)
            else:
                self.unsynced += 1
        return matched

    def expire(self, now_ns: int) -> None:
        self.waiting = {k: v for k, v in self.waiting.items() if now_ns - v[1] < self.hold_ns}

    def close_window(self) -> dict[Tuple4, OwdStats]:
        """The window's stats by direction (a flow's packets from source to destination), and a new window."""
        out = {t: OwdStats.of(d) for t, d in self.delays.items() if d}
        self.delays = defaultdict(list)
        self.unsynced = 0
        return out


def flow_owd(local: Tuple4, window: dict[Tuple4, OwdStats], rtt_us: float | None) -> dict[str, OwdStats | None]:
    """A flow's two directions ("out": local to remote, "in": back), as seen from its local end:
    the window's in-band stats, else RTT/2 marked as a fallback, else None (no RTT yet either)."""
    back = (local[2], local[3], local[0], local[1])
    out: dict[str, OwdStats | None] = {}
    for direction, key in (("out", local), ("in", back)):
        found = window.get(key)
        out[direction] = found or (OwdStats.fallback(rtt_us) if rtt_us else None)
    return out
