"""The hosts' pacing loop, host-local: each period, per directed link the host's flows cross,
the law (qos.pacing) sets the lower classes' rate from the higher class's queueing there (the
link's own reading, else the highest its flows saw) and its demand (its rate, or the share of
the time its data waited on the network, of the whole link), and each lower-class socket gets
its share (the smallest over the links it crosses). Each link has its own gains: a link whose
queue is read less often is stepped with that period, holding its rate between readings.

Across hosts (qos.shared): another host's reading of a link counts as this host's own for its
lower-class flows crossing that link, with the same law and gains. With several hosts pacing
against one link, each takes a share of the law's rate, so that their limits add up to one
law's, not several times its cut: the rate is split by policy weight over the sending
lower-class flows of all the hosts pacing there, as over one host's.

Pure: the flows come in as plain readings, the rates go out through an `Actuator` (the agent's
is qos.sockpace on the processes' sockets). What it paced it remembers, so a release (the higher
class idle, the flow's job no longer lower, the loop stopping) sets each back to no limit once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from clockfabric.qos.pacing import Gains, LinkPacer

if TYPE_CHECKING:
    from clockfabric.qos.shared import Shared

RANK = {"critical": 0, "normal": 1, "scavenger": 2}  # lower is higher
SocketId = tuple[int, int]  # (pid, socket inode)


@dataclass(frozen=True)
class Flow:
    """One socket of a job with a policy, as the last reading saw it."""

    sock: SocketId
    qos_class: str
    weight: int
    links: tuple[str, ...]  # the directed links it crosses, as the host knows them
    tx_bps: float  # what it sent, bits per second (0: idle)
    queue_s: float | None  # its packets' one-way delay above the path's floor; None: no new reading
    wanting: float = 0.0  # the share of the last reading it had data to send that the network held


@dataclass(frozen=True)
class LinkView:
    """What one period saw of a link, for telling the other hosts (qos.shared)."""

    rank: int  # the higher class there, this host's or another's
    queue_s: float | None  # this host's own new reading of the higher class's queueing; None: none
    high_bps: float  # this host's higher-class demand on it (PaceLoop._demand)
    low_weight: int  # the policy weights of this host's lower-class flows sending on it


class Actuator(Protocol):
    def __call__(self, sock: SocketId, bytes_per_s: int | None) -> None:
        """Limit the socket to this rate (None: no limit). Raises LookupError if it is gone."""


class PaceLoop:
    def __init__(self, link_of: Callable[[str], tuple[float, Gains]], actuator: Actuator):
        self.link_of = link_of  # a link's capacity (bits/s) and the gains for how often its queue is read
        self.actuator = actuator
        self.links: dict[str, tuple[int, LinkPacer]] = {}  # link -> (the higher class's rank, its law)
        self.paced: dict[SocketId, int] = {}  # socket -> the bytes per second it is limited to now
        self.limits: dict[str, float] = {}  # link -> this host's lower classes' rate on it, where limited
        self.views: dict[str, LinkView] = {}  # link -> what the last period saw there

    def _pacer(self, link: str, rank: int) -> LinkPacer:
        """The link's law; a new one when its higher class changed (another class's rate is not this one's)."""
        if link not in self.links or self.links[link][0] != rank:
            self.links[link] = (rank, LinkPacer(*self.link_of(link)))
        return self.links[link][1]

    def step(self, flows: Iterable[Flow], link_queues: dict[str, float] | None = None,
             shared: dict[str, Shared] | None = None) -> dict[SocketId, int]:
        """One period: the flows, the links' own queue readings (seconds) and the other hosts'
        readings (qos.shared). Returns the limits in force after it (bytes per second, by socket)."""
        by_link: dict[str, list[Flow]] = {}
        for f in flows:
            for link in f.links:
                by_link.setdefault(link, []).append(f)
        want: dict[SocketId, float] = {}
        self.limits, self.views = {}, {}
        for link, on in by_link.items():
            heard = (shared or {}).get(link)
            top = min(RANK.get(f.qos_class, 1) for f in on)
            if heard is not None and heard.rank < top:
                top = heard.rank
            high = [f for f in on if RANK.get(f.qos_class, 1) == top]
            low = [f for f in on if RANK.get(f.qos_class, 1) > top]
            own = [f.queue_s for f in high if f.queue_s is not None]
            if link_queues and link in link_queues:
                own.append(link_queues[link])
            queues = own + ([heard.queue_s] if heard and heard.rank == top and heard.queue_s is not None else [])
            high_bps = self._demand(link, high)
            # split over the sockets that send: an idle one (a control connection) would waste its
            # share; it gets the same share as a sending one until the next period sees it send
            total = sum(f.weight for f in low if f.tx_bps > 0) or sum(f.weight for f in low)
            self.views[link] = LinkView(top, max(own) if own else None, high_bps, total)
            others_high = heard.high_bps if heard and heard.rank == top else 0.0
            rate = self._pacer(link, top).step(high_bps + others_high, max(queues) if queues else None)
            if rate is None or not low:
                continue
            if heard is not None and heard.low_weight > 0 and total > 0:  # this host's share of one cut
                rate *= total / (total + heard.low_weight)
            self.limits[link] = rate
            for f in low:
                share = min(rate, rate * f.weight / total)
                want[f.sock] = min(want.get(f.sock, share), share)
        for link in set(self.links) - set(by_link):  # no flow of ours crosses it any more
            del self.links[link]
        return self._apply({s: max(1, round(bps / 8)) for s, bps in want.items()})

    def _demand(self, link: str, high: list[Flow]) -> float:
        """What the higher class wants of the link: its rate, or, where one of its flows had data
        waiting on the network a share b of the time, b of the whole link: an elastic flow takes
        what it is left, so while it waits its rate says what contention allows, not what it wants."""
        sent = sum(f.tx_bps for f in high)
        return max(sent, self.link_of(link)[0] * max((f.wanting for f in high), default=0.0))

    def _apply(self, want: dict[SocketId, int]) -> dict[SocketId, int]:
        for sock in [s for s in self.paced if s not in want]:
            self._set(sock, None)
        for sock, rate in want.items():
            if self.paced.get(sock) != rate:
                self._set(sock, rate)
        return dict(self.paced)

    def _set(self, sock: SocketId, rate: int | None) -> None:
        try:
            self.actuator(sock, rate)
        except LookupError:  # the socket or its process is gone: nothing to hold or release
            self.paced.pop(sock, None)
            return
        if rate is None:
            self.paced.pop(sock, None)
        else:
            self.paced[sock] = rate

    def release(self) -> None:
        """Every socket back to no limit (the loop stops)."""
        self._apply({})
        self.links = {}
