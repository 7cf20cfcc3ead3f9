"""A host's one-way delays to its probed peers, read through the two clocks' mappings to global
time: per path and direction the window's min, p50, p99 and the path's floor, each with the two
bounds added, and the class stream's delays (HostSync holds the exchanges and mappings they are
read from)."""

from __future__ import annotations

import math
from collections import defaultdict, deque
from functools import partial
from typing import TYPE_CHECKING

from clockfabric.clock.mapping import Mapping

if TYPE_CHECKING:
    from clockfabric.clock.pairs import PairWindow
    from clockfabric.probe.engine import Exchange

FLOOR_HORIZON = 30  # a path's floor is its lowest one-way delay over this many reports
# a one-way delay whose two clocks' bounds add up to more than this is not published as a number
OWD_TRUST_NS = 100_000.0


class DelayReadings:
    """The delay readings of HostSync, over the state it keeps."""

    host: str
    pairs: dict[str, PairWindow]
    mapping: Mapping | None
    peer_maps: dict[str, Mapping]
    floors: dict[tuple[str, str, str], deque[tuple[int, int]]]
    classed: dict[str, deque[Exchange]]
    report_ns: int
    owd_trust_ns: float

    def owd(self) -> list[dict]:
        """Per probed peer, path and direction: min, p50, p99 of the window (or of the time
        since the last reading, where `report_ns` is longer), and the floor,
        with `bound_ns` (the two clocks' bounds at the window's last packet, added). A delay
        read by an unsynced clock, or whose bound is over `owd_trust_ns`, is no number anyone
        should act on: its row has `trusted` false, a `reason`, and no delays."""
        if self.mapping is None:
            return []
        rows = []
        for peer, pair in self.pairs.items():
            theirs = self.peer_maps.get(peer)
            if theirs is None or not pair.exchanges:
                continue
            ours = self.mapping
            last = pair.exchanges[-1]
            bound = ours.bound_at(last.rx[1]) + theirs.bound_at(last.peer_tx[1])
            why = distrust(ours, theirs, bound, self.owd_trust_ns)
            by_path: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)  # (sent, received)
            for ex in pair.exchanges:
                by_path[(ex.path, "out")].append((ex.tx[0], ex.peer_rx[0]))
                by_path[(ex.path, "back")].append((ex.peer_tx[0], ex.rx[0]))
            for (path, direction), stamps in sorted(by_path.items()):
                sender, receiver = (ours, theirs) if direction == "out" else (theirs, ours)
                delay = partial(one_way_ns, sender, receiver)
                delays = sorted(map(delay, stamps))
                lows = self.floors.setdefault((peer, path, direction), deque(maxlen=FLOOR_HORIZON))
                lows.append(min(stamps, key=delay))
                src, dst = (self.host, peer) if direction == "out" else (peer, self.host)
                row = {"src": src, "dst": dst, "path": path, "n": len(delays), "bound_ns": bound,
                       "trusted": not why}
                if why:
                    row["reason"] = why
                else:
                    row |= {"min_ns": delays[0], "p50_ns": percentile(delays, 50), "p99_ns": percentile(delays, 99),
                            "floor_ns": min(map(delay, lows))}
                rows.append(row)
        return rows

    def spans(self) -> dict[str, int]:
        """How far back each reading's delays reach (`owd`, `class_owd`): one read just after a queue
        began is mostly of the time before it, and its quiet clears nothing yet."""
        return {"owd": self.report_ns, "class_owd": self.report_ns}

    def class_owd(self) -> list[dict]:
        """The class stream's delays out to each probed peer, by path: the median over the time
        one reading spans (`report_ns`; the newest exchange with any peer is now), trusted only.
        No longer: the stream is sparse, a path holds an exchange or two in any span, and a longer
        one only puts off the moment a reading taken since a queue began is all of after it (and
        can clear its links). Their floor is the path's own (`owd`): the same 5-tuple crosses the
        same links."""
        newest = max((p.exchanges[-1].tx[0] for p in self.pairs.values() if p.exchanges), default=None)
        if self.mapping is None or newest is None:
            return []
        rows = []
        for peer, held in list(self.classed.items()):
            while held and held[0].tx[0] < newest - self.report_ns:
                held.popleft()
            theirs = self.peer_maps.get(peer)
            if not held or theirs is None:
                continue
            bound = self.mapping.bound_at(held[-1].tx[0]) + theirs.bound_at(held[-1].peer_rx[0])
            if distrust(self.mapping, theirs, bound, self.owd_trust_ns):
                continue
            by_path: dict[tuple[str, int], list[int]] = defaultdict(list)
            for ex in held:
                by_path[(ex.path, ex.dscp or 0)].append(one_way_ns(self.mapping, theirs, (ex.tx[0], ex.peer_rx[0])))
            rows += [{"src": self.host, "dst": peer, "path": path, "dscp": dscp, "n": len(delays), "bound_ns": bound,
                      "p50_ns": percentile(sorted(delays), 50)} for (path, dscp), delays in sorted(by_path.items())]
        return rows


def one_way_ns(sender: Mapping, receiver: Mapping, stamp: tuple[int, int]) -> int:
    """A packet's one-way delay from its (sent, received) local timestamps, on the global clock."""
    return receiver.global_ns(stamp[1]) - sender.global_ns(stamp[0])


def stated(value_ns: float, bound_ns: float) -> float:
    """A delay as a measurement is stated: rounded to the place of its uncertainty's second
    significant digit (GUM 7.2.6), the uncertainty being the row's two clock bounds. 52,347 ns
    known to 1,100 ns is 52,300 ns; known to 900 ns, 52,350 ns. The digits below say nothing
    about the path; written to the series engine they cost bytes, as the noise they are."""
    if not bound_ns >= 10 or not math.isfinite(bound_ns):
        return value_ns
    place = 10 ** (math.floor(math.log10(bound_ns)) - 1)
    return round(value_ns / place) * place


def distrust(ours: Mapping, theirs: Mapping, bound_ns: float, trust_ns: float) -> str:
    """Why a delay between these two clocks cannot be trusted; empty if it can."""
    for who, m in (("ours", ours), ("the peer's", theirs)):
        if not m.synced:
            return f"{who} clock unsynced: {m.reason or 'not tied to the reference'}"
    if bound_ns > trust_ns:
        return f"clock bound {bound_ns / 1e3:.1f} us over {trust_ns / 1e3:.1f} us"
    return ""


def percentile(ordered: list[int], q: float) -> float:
    """numpy's default (linear) percentile of a sorted list: a few points want no array."""
    at = (len(ordered) - 1) * q / 100
    i = int(at)
    j = min(i + 1, len(ordered) - 1)
    return float(ordered[i] + (ordered[j] - ordered[i]) * (at - i))
