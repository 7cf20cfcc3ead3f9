"""Why is this job slow: its flows over a window, compared with their siblings and their paths'
probe floor. Pure: the flows, floors, links and events come in with the time; no I/O.

A flow's delay is its in-band one-way delay where the agents measure one (`owd_us`, marked
`inband`), else half its smoothed RTT, marked as that fallback: RTT/2 counts both hosts' stacks,
so it is held to a wider margin over the probe floor. A flow is *network-slow* when its delay
stands far above its siblings' or its path's probe floor, or, its rate far below theirs, its data
waits far longer than theirs or its segments are sent again far more often (*held*: no delay shows
where); *starved* when its rate is far below its siblings' and nothing of that holds: its sender
is not sending, which is the host's doing, not the network's. `rootcause_verdict` turns these into one verdict.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

Hop = tuple[str, str]  # (link name, "from>to" nodes; "" where the direction is unknown)


# what a flow's pushes say, by stat (`job_flow_<stat>`, `other_flow_<stat>`): the reading's field
# and the value's scale; the in-band delay is the sending end's `out` direction
READINGS = {"tx_bps": ("tx_bps", 1.0), "rtt_us": ("rtt_us", 1.0), "owd_out_p50_ns": ("owd_us", 1e-3),
            "send_queue_bytes": ("send_queue_bytes", 1.0), "retransmits_total": ("retransmits", 1.0)}
FALLBACK = "owd_out_fallback"  # 1: that owd is the agent's RTT/2 stand-in, not an in-band delay


def reading(fields: dict[str, float], stat: str, value: float) -> None:
    """Add one pushed sample's value to a reading's fields (FALLBACK as `fallback`)."""
    if stat == FALLBACK:
        fields["fallback"] = value
    elif stat in READINGS:
        field, scale = READINGS[stat]
        fields[field] = value * scale


def point(t_ns: int, fields: dict[str, float]) -> FlowPoint:
    """A reading from what one push said: an RTT/2 stand-in counts as no in-band delay."""
    kept = {k: v for k, v in fields.items() if k != "fallback"}
    if fields.get("fallback"):
        kept.pop("owd_us", None)
    return FlowPoint(t_ns, **kept)


@dataclass(frozen=True)
class FlowPoint:
    """One reading of one flow."""

    t_ns: int
    tx_bps: float | None = None
    rtt_us: float | None = None
    owd_us: float | None = None  # in-band one-way delay (p50 of the reading's window), where measured
    send_queue_bytes: float | None = None  # written by the program, not yet acknowledged
    retransmits: float | None = None  # segments its sockets sent again over their lives (a counter)


@dataclass(frozen=True)
class Flow:
    """One flow (one socket, from its sender's side) over the window."""

    host: str
    flow: str  # "local:port->remote:port"
    jobid: str | None  # None: a flow of no job
    peer: str | None = None
    plane: int | None = None  # the plane of the NIC it leaves on; None: no fabric NIC
    hops: tuple[Hop, ...] = ()  # the links it crosses, in order from host
    dscp: int | None = None  # the DSCP its packets carry, where known
    points: tuple[FlowPoint, ...] = ()
    # every link it may cross, in order from host: more than `hops` where its switch is not traced
    # (a trace lost in the very queue that slows it), so a fault there is still in reach; () = `hops`
    reach: tuple[Hop, ...] = ()
    # every DSCP its packets carried in the window, where more than one (a group's connections
    # each mark their own: one the program set apart is a misconfigured rank); () = (`dscp`,)
    dscps: tuple[int, ...] = ()

    def may_cross(self) -> tuple[Hop, ...]:
        return self.reach or self.hops

    def marks(self) -> tuple[int, ...]:
        return self.dscps or (() if self.dscp is None else (self.dscp,))


@dataclass(frozen=True)
class ProbePath:
    """A probe path's floor and latest delay, and the links it crosses."""

    src: str
    dst: str
    hops: tuple[Hop, ...]
    floor_us: float
    p50_us: float | None = None
    t_ns: int | None = None  # when the delay was read; None: now
    span_ns: int = 0  # how far back before `t_ns` the delay's packets reach


@dataclass(frozen=True)
class LinkEvent:
    t_ns: int
    link: str
    kind: str  # link_down, link_up, failover_*


@dataclass(frozen=True)
class Thresholds:
    rate_ratio: float = 0.5  # a flow under this share of its siblings' median rate is far below them
    delay_ratio: float = 3.0  # a delay this many times the siblings' median (or the floor) is far above
    inband_margin_us: float = 50.0  # and at least this far above, in-band
    rtt_margin_us: float = 200.0  # or this far, from RTT/2: both stacks' time rides along
    busy_share: float = 0.1  # traffic of others on a link above this share of its rate is a load
    degraded_share: float = 0.5  # a link queueing while carrying under this share of its rate is degraded
    active_bps: float = 1e6  # a flow under this rate is idle: no sibling comparison of its rate
    recent_ns: int = 10 * 10**9  # flows are judged on their latest readings: a fault named within this long
    newest: int = 3  # a delay this many newest readings all stand above is judged at once (see `settled`)
    # a flow far below its siblings' rate that sent at least this many segments again in the window
    # (and far more than they did) lost them in the network: it waits out retransmission timeouts
    # with its delay at the floor, and is no straggler
    resent_segments: int = 10
    # what explains a symptom is seen up to this long after it: a new flow's load (a socket reading
    # or two, a push, the engine's search: 3.8 s measured on the lab), a queue's delay (its newest
    # readings). A queue younger than this that no load seen explains may be a new flow's; flows
    # held back this briefly with no delay to show where may not have shown it yet
    unseen_ns: int = 4 * 10**9
    # a packet ahead in a FIFO (a sibling's, in service) is not a queue: its time on the path's
    # slowest link comes on top of the margins above (at 100 Mbit/s a full one is 120 us, at
    # 100 Gbit/s 0.12 us)
    packets_ahead: int = 1
    packet_bits: int = 1500 * 8

    def margin_us(self, source: str, hops: Iterable[Hop], rates: dict[str, float] | None) -> float:
        """How far above its floor or siblings a delay read from `source` must stand on a path of
        `hops` to be a queue: the source's margin, plus `packets_ahead` on its slowest link of known rate."""
        base = self.inband_margin_us if source == "inband" else self.rtt_margin_us
        slowest = min((r for name, _ in hops if (r := (rates or {}).get(name))), default=None)
        return base if slowest is None else base + self.packets_ahead * self.packet_bits / slowest * 1e6


@dataclass
class FlowStats:
    """One flow's summary over the window, and what is wrong with it."""

    flow: Flow
    rate_bps: float | None
    delay_us: float | None
    delay_source: str  # "inband", "rtt/2", or "none"
    floor_us: float | None = None  # its path's probe floor, where a probe path matches
    send_queue_bytes: float | None = None  # what waits to be sent and acknowledged in each of its newest readings
    why: list[str] = field(default_factory=list)  # the comparisons it failed
    network_slow: bool = False
    starved: bool = False
    # network-slow: the first of its newest readings that all stand far above (held: that all hold its data)
    queued_since_ns: int | None = None
    held: bool = False  # network-slow by its waiting data or lost segments alone: no delay shows where
    resent: float | None = None  # segments its sockets sent again over the window
    resent_since_ns: int | None = None  # when the first of those was read

    def row(self) -> dict:
        f = self.flow
        return {"host": f.host, "flow": f.flow, "peer": f.peer, "plane": f.plane, "dscp": f.dscp,
                "dscps": list(f.marks()),
                "links": [name for name, _ in f.hops], "rate_bps": self.rate_bps, "delay_us": self.delay_us,
                "delay_source": self.delay_source, "probe_floor_us": self.floor_us,
                "send_queue_bytes": self.send_queue_bytes, "network_slow": self.network_slow,
                "resent": self.resent, "starved": self.starved, "why": self.why}


def median(values: Iterable[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def medians_without(values: list[float | None]) -> list[float | None]:
    """For each value, the median of the others (Nones left out, as `median` leaves them): from
    one sort, so a job of n flows is judged against its siblings in n log n, not n squared."""
    ranked = sorted((v, i) for i, v in enumerate(values) if v is not None)
    found = [v for v, _ in ranked]
    rank = {i: r for r, (_, i) in enumerate(ranked)}

    def without(r: int | None) -> float | None:
        n = len(found) - (r is not None)

        def at(k: int) -> float:
            return found[k if r is None or k < r else k + 1]
        if n == 0:
            return None
        return at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) / 2

    return [without(rank.get(i)) for i in range(len(values))]


def in_window(flow: Flow, since_ns: int) -> Flow:
    """The flow with its readings since `since_ns`; itself where it has no older one (the detectors
    judge every flow each tick, and their readings are already the window's)."""
    if all(p.t_ns >= since_ns for p in flow.points):
        return flow
    return Flow(**{**flow.__dict__, "points": tuple(p for p in flow.points if p.t_ns >= since_ns)})


def settled(values: list[float | None], newest: int) -> float | None:
    """A flow's delay over its readings: their median; or, where its `newest` readings all stand
    above that median, the lowest of them. A queue that built up lately is judged as soon as it
    has held for `newest` readings, not once it fills half the window; one reading's spike is not."""
    found = [v for v in values if v is not None]
    if not found:
        return None
    middle = statistics.median(found)
    if len(found) <= newest:
        return middle
    return max(middle, min(found[-newest:]))


def summarize(flow: Flow, floors: Floors, newest: int = Thresholds.newest) -> FlowStats:
    inband = settled([p.owd_us for p in flow.points], newest)
    rtt = settled([p.rtt_us for p in flow.points], newest)
    delay, source = (inband, "inband") if inband is not None else (
        (rtt / 2, "rtt/2") if rtt is not None else (None, "none"))
    queued = [p.send_queue_bytes for p in flow.points if p.send_queue_bytes is not None]
    held = min(queued[-newest:]) if len(queued) >= newest else None  # waiting in each: standing, not a write's flicker
    stats = FlowStats(flow, median(p.tx_bps for p in flow.points), delay, source, probe_floor(flow, floors), held)
    stats.resent, stats.resent_since_ns = resent(flow.points)
    return stats


def resent(points: Iterable[FlowPoint]) -> tuple[float | None, int | None]:
    """Segments sent again over the readings (the rises of their counter: a socket that closes
    takes its count with it), and when the first rise was read; (None, None) where none counts."""
    total, first, last = 0.0, None, None
    for p in points:
        if p.retransmits is None:
            continue
        if last is not None and p.retransmits > last:
            total += p.retransmits - last
            first = p.t_ns if first is None else first
        last = p.retransmits
    return (None if last is None else total), first


Floors = dict[tuple[str, str | None], list[ProbePath]]  # the probe paths by (src, dst)


def by_pair(floors: Iterable[ProbePath]) -> Floors:
    out: Floors = {}
    for p in floors:
        out.setdefault((p.src, p.dst), []).append(p)
    return out


def probe_floor(flow: Flow, floors: Floors) -> float | None:
    """The floor of the probe path from the flow's host to its peer over the same links; else the
    lowest floor of that pair (what every path between them shares)."""
    pair = floors.get((flow.host, flow.peer), [])
    same = [p for p in pair if flow.hops and {h[0] for h in p.hops} == {h[0] for h in flow.hops}]
    chosen = same or pair
    return min(p.floor_us for p in chosen) if chosen else None


def far_above(value: float, base: float, margin_us: float, limits: Thresholds) -> bool:
    return value > base * limits.delay_ratio and value - base > margin_us


def judge(stats: list[FlowStats], limits: Thresholds, rates: dict[str, float] | None = None) -> None:
    """Mark each flow network-slow or starved against its siblings (the others of the list) and its
    floor; `rates`, the links' configured bits per second, where known (see Thresholds.margin_us)."""
    sib_delays = medians_without([s.delay_us for s in stats])
    sib_rates = medians_without([s.rate_bps if (s.rate_bps or 0) >= limits.active_bps else None for s in stats])
    for s, sib_delay, sib_rate in zip(stats, sib_delays, sib_rates, strict=True):
        margin = limits.margin_us(s.delay_source, s.flow.hops, rates)
        if s.delay_us is not None and sib_delay is not None and far_above(s.delay_us, sib_delay, margin, limits):
            s.why.append(f"delay {s.delay_us:.0f} us ({s.delay_source}) vs its siblings' {sib_delay:.0f} us")
        if s.delay_us is not None and s.floor_us is not None and far_above(s.delay_us, s.floor_us, margin, limits):
            s.why.append(f"delay {s.delay_us:.0f} us ({s.delay_source}) vs its path's probe floor {s.floor_us:.0f} us")
        s.network_slow = bool(s.why)
        if s.network_slow:
            delay = s.delay_us or 0.0
            bases = [b for b in (sib_delay, s.floor_us) if b is not None and far_above(delay, b, margin, limits)]
            s.queued_since_ns = run_since([(p.t_ns, delay_of(s, p)) for p in s.flow.points], min(bases), margin,
                                          limits)
        if sib_rate is not None and s.rate_bps is not None and s.rate_bps < sib_rate * limits.rate_ratio:
            s.why.append(f"rate {s.rate_bps / 1e6:.1f} Mbit/s vs its siblings' {sib_rate / 1e6:.1f} Mbit/s")
            # a flow whose program stopped sends nothing and has nothing waiting: starved, its host to
            # blame. One with its data waiting, far longer than its siblings' waits, is held back by
            # the network, even where its delay shows no queue (a loss, or a queue not sampled yet)
            # against the least any sibling's data waits: siblings the same fault holds wait too,
            # and where they are half the job their median is the fault's, not a healthy flow's
            wait = send_wait_us(s, sib_rate)
            sib_wait = min((w for o in stats if o is not s and (w := send_wait_us(o, sib_rate)) is not None),
                           default=0.0)
            if not s.network_slow and wait is not None and far_above(wait, sib_wait, limits.rtt_margin_us, limits):
                s.why.append(f"{(s.send_queue_bytes or 0) / 1024:.0f} KiB wait to be sent: {wait / 1000:.0f} ms "
                             f"at its siblings' rate, vs the least of theirs {sib_wait / 1000:.1f} ms")
                s.network_slow = s.held = True
                waits = [(p.t_ns, None if p.send_queue_bytes is None else p.send_queue_bytes * 8 / sib_rate * 1e6)
                         for p in s.flow.points]
                s.queued_since_ns = run_since(waits, sib_wait, limits.rtt_margin_us, limits)
            lost = median(o.resent for o in stats if o is not s) or 0.0
            if (not s.network_slow and s.resent is not None and s.resent >= limits.resent_segments
                    and s.resent > lost * limits.delay_ratio):
                s.why.append(f"{s.resent:.0f} segments sent again in the window, vs its siblings' {lost:.0f}: "
                             "lost in the network")
                s.network_slow = s.held = True
                s.queued_since_ns = s.resent_since_ns
            # idle is read, not assumed: a flow whose send queue went unread (its host's pushes
            # thinned out) may be one the network holds; it stays unjudged until read
            s.starved = not s.network_slow and s.send_queue_bytes is not None


def send_wait_us(s: FlowStats, rate_bps: float) -> float | None:
    """How long the flow's waiting data takes to send at `rate_bps`."""
    return None if s.send_queue_bytes is None or rate_bps <= 0 else s.send_queue_bytes * 8 / rate_bps * 1e6


def delay_of(s: FlowStats, p: FlowPoint) -> float | None:
    """A reading's delay, read as the flow's delay was (in-band, or RTT/2)."""
    return p.owd_us if s.delay_source == "inband" else (None if p.rtt_us is None else p.rtt_us / 2)


def run_since(readings: list[tuple[int, float | None]], base: float, margin: float, limits: Thresholds) -> int | None:
    """When the newest run of (time, value) readings standing far above `base` began."""
    since = None
    for t_ns, value in reversed(readings):
        if value is None:
            continue
        if not far_above(value, base, margin, limits):
            break
        since = t_ns
    return since


def recent_width(flows: Iterable[Flow], limits: Thresholds) -> int:
    """How far back a job's latest readings reach: `recent_ns`, or two of the job's usual spacing
    between readings where its hosts write more sparsely (a fleet writing every 10 s), so that a
    flow whose newest reading is on time has it in the window and one a reading late still has
    one. The usual spacing is the closest of its flows' (as `rootcause_pace.late_hosts` takes it)."""
    spacings = [(f.points[-1].t_ns - f.points[0].t_ns) / (len(f.points) - 1) for f in flows if len(f.points) > 1]
    return max(limits.recent_ns, round(2 * min(spacings))) if spacings else limits.recent_ns


def job_flows(flows: list[Flow], jobid: str, since_ns: int, recent_ns: int, limits: Thresholds,
              floors: list[ProbePath], rates: dict[str, float] | None = None) -> list[FlowStats]:
    """The job's flows that sent in the window (from `since_ns`), summarized on their readings
    from `recent_ns` on and judged (`rates`: the links' configured bits per second, where known)."""
    # a socket that never sent in the window is the receiving end (or a control connection): its
    # direction is judged at its sender
    sent = [f for f in flows if f.jobid == jobid and any((p.tx_bps or 0) >= limits.active_bps
                                                           for p in f.points if p.t_ns >= since_ns)]
    mine = [in_window(f, recent_ns) for f in sent]
    paired = by_pair(floors)
    stats = [summarize(f, paired, limits.newest) for f in mine if f.points]
    judge(stats, limits, rates)
    return stats


def on_hop(hop: Hop, hops: Iterable[Hop]) -> bool:
    """Whether `hops` cross `hop` (the same direction, where both are known)."""
    name, way = hop
    return any(n == name and (not way or not w or w == way) for n, w in hops)


def load_on(hop: Hop, flows: list[Flow], since_ns: int) -> dict[str | None, float]:
    """Rate that crosses, or may cross (its switch not traced), a hop since `since_ns`, by job (None: no job)."""
    out: dict[str | None, float] = {}
    for f in flows:
        if on_hop(hop, f.may_cross()):
            rate = median(p.tx_bps for p in f.points if p.t_ns >= since_ns) or 0.0
            out[f.jobid] = out.get(f.jobid, 0.0) + rate
    return out
