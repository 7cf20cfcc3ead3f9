"""Queue readings shared between hosts, for the hosts' pacing (agent.qos_pace).

A host's higher-class flow that sees queueing on the last hop into a peer tells the other hosts,
so that a host with lower-class flows into that peer (and no higher-class flow there) paces them
too. A host pacing against a shared reading tells its lower-class flows' weights on the link
back, so that every host pacing on one link takes a share of one cut (qos.pace_loop) instead of
each cutting the whole of it.

A link is named the same way on every host: `>ADDRESS`, the last hop into the host with that
address. A reading: the link, the class that sees the queue, its queueing above the path's floor
(None: the host only tells its lower-class weight there), the higher class's rate through the
link, the policy weights of the host's lower-class flows sending on it, and when the queue was
read. One message carries all of a host's readings, with the time it was sent, and the links
the host wants readings of: the last hops it has lower-class flows into.

Only the hosts that want a link's readings are told them: a host with lower-class flows into a
peer says so to every host (each WANTS_REPEAT_S, and at once when the links change), and a host
with readings tells those whose wants, heard within WANTS_STALE_S, name one of its links. A
fleet where no lower class sends into a peer carries no readings about it at all.

What is accepted is bounded: a message of a fleet host, sent within STALE_S, not from the future,
at most MAX_READINGS readings and as many links wanted, each of a known link and class with
values in range. What is not is refused whole and counted by reason. A reading counts only while
its last message is within STALE_S (the sender repeats an unchanged one every REPEAT_S): a host
that stops telling stops holding the others paced.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from clockfabric.qos.pace_loop import RANK

KIND = "qos_queues"  # the control message's type
MAX_READINGS = 32  # per message
STALE_S = 0.5  # a message older than this counts for nothing
REPEAT_S = 0.2  # a sender repeats an unchanged message this often (a changed one goes at once)
MAX_FANOUT = 8  # the hosts told per period at most, of each kind (the rest in the next periods, in turn)
WANTS_REPEAT_S = 1.0  # a host repeats the links it wants readings of this often (a change goes at once)
WANTS_STALE_S = 3.0  # wants not heard again within this are forgotten
FUTURE_S = 0.2  # the clocks' error a message's time may carry
MAX_QUEUE_S = 1.0
MAX_BPS = 1e12
MAX_WEIGHT = 100_000  # the weights of a thousand flows


@dataclass(frozen=True)
class Reading:
    link: str  # ">ADDRESS": the last hop into that host
    qos_class: str  # the class whose packets met the queue (or, without a queue, the class paced against)
    queue_s: float | None  # queueing above the floor; None: only the host's lower-class weights are told
    high_bps: float  # the higher class's rate through the link from this host
    low_weight: int  # the policy weights of this host's lower-class flows sending on the link
    read_ns: int  # when the queue was read: a new time is a new reading


@dataclass(frozen=True)
class Shared:
    """What the other hosts tell of one link, joined: the best class seeing a queue there."""

    rank: int
    queue_s: float | None  # the largest new queue reading at that class; None: none new this period
    high_bps: float  # the other hosts' higher-class rate through the link
    low_weight: int  # the other hosts' lower-class weights on it (for this host's share of the cut)


def encode(host: str, sent_ns: int, readings: list[Reading], wants: frozenset[str] = frozenset()) -> dict:
    return {"t": KIND, "host": host, "at": sent_ns,
            "r": [[r.link, r.qos_class, None if r.queue_s is None else round(r.queue_s * 1e6),
                   round(r.high_bps), r.low_weight, r.read_ns] for r in readings[:MAX_READINGS]],
            "w": sorted(wants)[:MAX_READINGS]}


class Refused(ValueError):
    pass


def _reading(raw: object, links: frozenset[str], sent_ns: int, max_read_age_s: float) -> Reading:
    if not isinstance(raw, list) or len(raw) != 6:
        raise Refused("bad reading")
    link, cls, queue_us, high, low, read_ns = raw
    if not isinstance(link, str) or link not in links:
        raise Refused("unknown link")
    if not isinstance(cls, str) or cls not in RANK:
        raise Refused("unknown class")
    if queue_us is not None and not (isinstance(queue_us, int) and 0 <= queue_us <= MAX_QUEUE_S * 1e6):
        raise Refused("bad reading")
    if not (isinstance(high, int) and 0 <= high <= MAX_BPS and isinstance(low, int) and 0 <= low <= MAX_WEIGHT):
        raise Refused("bad reading")
    if not isinstance(read_ns, int) or not 0 <= sent_ns - read_ns <= max_read_age_s * 1e9:
        raise Refused("stale reading")
    return Reading(link, cls, None if queue_us is None else queue_us / 1e6, float(high), low, read_ns)


class SharedQueues:
    """The readings heard from the other hosts, the newest per host and link."""

    def __init__(self, hosts: dict[str, str], max_read_age_s: float, links: frozenset[str]):
        self.hosts = hosts  # fleet host -> its address: only these are heard, each from its own
        self.links = links  # ">ADDRESS" for each of the fleet's hosts' addresses
        self.max_read_age_s = max_read_age_s  # a last hop's reading is new once a window
        self.heard: dict[tuple[str, str], tuple[int, Reading]] = {}  # (host, link) -> (sent, reading)
        self.used: dict[tuple[str, str], int] = {}  # (host, link) -> the read time last handed out
        self.wants: dict[str, tuple[int, frozenset[str]]] = {}  # host -> (sent, the links it wants readings of)
        self.accepted = 0
        self.refused: Counter[str] = Counter()

    def hear(self, msg: dict, src: str, now_ns: int) -> bool:
        """One message from `src` (an address); False (and counted) if refused."""
        try:
            host, sent = msg.get("host"), msg.get("at")
            if not isinstance(host, str) or self.hosts.get(host) != src:
                raise Refused("unknown host")
            if not isinstance(sent, int) or now_ns - sent > STALE_S * 1e9:
                raise Refused("stale")
            if sent - now_ns > FUTURE_S * 1e9:
                raise Refused("future")
            raw = msg.get("r")
            if not isinstance(raw, list) or len(raw) > MAX_READINGS:
                raise Refused("too many readings")
            readings = [_reading(r, self.links, sent, self.max_read_age_s) for r in raw]
            wants = msg.get("w", [])
            if not (isinstance(wants, list) and len(wants) <= MAX_READINGS
                    and all(isinstance(w, str) and w in self.links for w in wants)):
                raise Refused("bad wants")
        except Refused as e:
            self.refused[str(e)] += 1
            return False
        for key in [k for k in self.heard if k[0] == host]:  # what the host no longer tells is gone
            del self.heard[key]
        for r in readings:
            self.heard[(host, r.link)] = (sent, r)
        self.wants[host] = (sent, frozenset(wants))
        self.accepted += 1
        return True

    def readers(self, links: set[str], now_ns: int) -> list[str]:
        """The hosts that want readings of any of these links, by their last word on it."""
        return sorted(host for host, (sent, wants) in self.wants.items()
                      if now_ns - sent <= WANTS_STALE_S * 1e9 and not wants.isdisjoint(links))

    def take(self, now_ns: int) -> dict[str, Shared]:
        """The live readings by link; a queue reading is handed out once, when it is new."""
        for key in [k for k, (sent, _) in self.heard.items() if now_ns - sent > STALE_S * 1e9]:
            del self.heard[key]
            self.used.pop(key, None)
        by_link: dict[str, list[tuple[tuple[str, str], Reading]]] = {}
        for key, (_, r) in self.heard.items():
            by_link.setdefault(r.link, []).append((key, r))
        out = {}
        for link, heard in by_link.items():
            seeing = [(k, r) for k, r in heard if r.queue_s is not None]
            if not seeing:  # only lower-class rates told: no host's higher class there any more
                continue
            rank = min(RANK[r.qos_class] for _, r in seeing)
            new: list[float] = []
            for k, r in seeing:
                if RANK[r.qos_class] == rank and self.used.get(k) != r.read_ns:
                    self.used[k] = r.read_ns
                    new.append(r.queue_s or 0.0)
            out[link] = Shared(rank, max(new) if new else None,
                               sum(r.high_bps for _, r in seeing if RANK[r.qos_class] == rank),
                               sum(r.low_weight for _, r in heard))
        return out


class Audience:
    """Who hears a host's message each period: the hosts that want its new readings, and, in
    rounds, every host, while the links it wants are new or due again (WANTS_REPEAT_S). At
    most MAX_FANOUT of each a period, the rest in turn in the next ones."""

    def __init__(self, peers: list[str], fanout: int = MAX_FANOUT):
        self.peers, self.fanout = peers, fanout
        self._next_reader = 0
        self._said: frozenset[str] = frozenset()  # the links last said to be wanted
        self._due = 0.0  # when they are said again
        self._round: list[str] = []  # the peers still to hear them

    def pick(self, readers: list[str], wants: frozenset[str], now_s: float) -> list[str]:
        """`readers`: the hosts that want this period's new readings (none: nothing new)."""
        to = set()
        if readers:
            start = self._next_reader % len(readers)
            to.update((readers[start:] + readers[:start])[:self.fanout])
            self._next_reader += self.fanout
        if wants != self._said or (wants and now_s >= self._due):
            self._said, self._due, self._round = wants, now_s + WANTS_REPEAT_S, list(self.peers)
        to.update(self._round[:self.fanout])
        del self._round[:self.fanout]
        return sorted(to)
