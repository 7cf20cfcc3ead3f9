"""What the controller knows of the fabric besides the flows (probe paths and their floors, link
rates, link events, traffic classes, what hosts' NICs counted), and where that evidence and the
job's in-band delays locate a queue on the slow flows' paths (localization). Pure (see rootcause).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from clockfabric import localization
from clockfabric.controller.rootcause import (
    Flow,
    FlowStats,
    Hop,
    LinkEvent,
    ProbePath,
    Thresholds,
    far_above,
    median,
    on_hop,
)
from clockfabric.controller.rootcause_siblings import crossed_quiet, returned_quiet


class Probe(NamedTuple):
    path: ProbePath
    clears: bool  # its quiet clears the links it crosses
    kind: str  # "probe" (the clock's) or "class probe"
    margin_us: float  # how far above its floor it must stand to be queued


@dataclass(frozen=True)
class Fabric:
    """What the controller knows besides the flows."""

    floors: list[ProbePath] = field(default_factory=list)
    link_rates: dict[str, float] = field(default_factory=dict)  # configured bits per second, by link name
    events: list[LinkEvent] = field(default_factory=list)
    collective_dscp: tuple[int, ...] | None = None  # None: the fabric has no traffic classes
    in_class: list[ProbePath] = field(default_factory=list)  # probes in the jobs' class there, same floors
    # (host, link, "tx" or "rx") -> times (ns), bits a second: what a host's NIC counted on its own link
    nic: dict[tuple[str, str, str], tuple[list[int], list[float]]] = field(default_factory=dict)
    since_ns: int | None = None  # the queue judged began then (read_since); None: not timed

    def nic_bps(self, hop: Hop, since_ns: int) -> float | None:
        """What the NIC at the host's end of its own link counted crossing it that way since
        `since_ns` (the median): every packet, its flow reported or not; None off hosts' links. A
        rate spans the time since the read before it: one whose span began earlier counts load
        from before the fault too (a host behind a slow link reports late, its reads far apart)."""
        src, _, dst = hop[1].partition(">")
        times, rates = self.nic.get((src, hop[0], "tx")) or self.nic.get((dst, hop[0], "rx")) or ([], [])
        return median(v for began, v in zip(times[:-1], rates[1:], strict=True) if began >= since_ns) if times else None

    def probes(self, limits: Thresholds) -> list[Probe]:
        """Every probe path as evidence. The clock's clear their links only on one FIFO a port (on
        a fabric with classes they ride the priority class, and their quiet says nothing of the
        job's queue); the class stream's always, and they are held to the job's flows' margin:
        they wait in the same queue, behind the same bursts (Thresholds.margin_us). Neither clears
        with a reading whose packets reach back before the queue began (`whole`)."""
        return ([Probe(p, self.collective_dscp is None and self.whole(p), "probe", limits.inband_margin_us)
                 for p in self.floors]
                + [Probe(p, self.whole(p), "class probe", limits.margin_us("inband", p.hops, self.link_rates))
                   for p in self.in_class])

    def whole(self, p: ProbePath) -> bool:
        """Whether every packet behind the path's reading left after the queue began. A median over
        seconds that began before it can still show the queue (most of its packets met it) but
        its quiet is the time before: where the queue drops what it cannot hold, the packets
        that get through are mostly the old ones."""
        return self.since_ns is None or p.t_ns is None or p.t_ns - p.span_ns >= self.since_ns

    def read_since(self, t_ns: int) -> Fabric:
        """The same fabric with only the probe delays read at or after `t_ns`, when the queue
        began (the floors stay). A path is probed every few seconds: a reading from before a queue
        began says nothing of it, and one at its floor would clear the very link that queues now."""
        def fresh(p: ProbePath) -> ProbePath:
            return p if p.t_ns is None or p.t_ns >= t_ns else replace(p, p50_us=None)
        return replace(self, floors=[fresh(p) for p in self.floors], in_class=[fresh(p) for p in self.in_class],
                       since_ns=t_ns)


def probes_queued(hop: Hop, fabric: Fabric, limits: Thresholds) -> int:
    """How many probe paths across `hop` see their delay far above their floor: a queue there
    delays every path across it, whoever sends."""
    return sum(1 for p, _, _, margin in fabric.probes(limits) if p.p50_us is not None and on_hop(hop, p.hops)
               and far_above(p.p50_us, p.floor_us, margin, limits))


def observations(stats: list[FlowStats], fabric: Fabric, limits: Thresholds) -> list[localization.Observation]:
    """The probe mesh's paths and the job's flows as localization's evidence. A probe path at its
    floor clears its links only where it waits where the job does (Fabric.probes). A flow's delay
    counts only in-band (RTT/2 counts the way back too); judged as the verdict judges it."""
    out = []
    for p, clears, kind, margin in fabric.probes(limits):
        if p.p50_us is None:
            continue
        queued = far_above(p.p50_us, p.floor_us, margin, limits)
        if queued or (clears and p.p50_us - p.floor_us <= margin / 2):
            out.append(localization.Observation(f"{kind} {p.src}->{p.dst} " + ",".join(n for n, _ in p.hops),
                                                p.hops, p.p50_us - p.floor_us, localization.PROBE,
                                                src=p.src, dst=p.dst, queued=queued))
    for s in stats:
        f, inband = s.flow, s.delay_source == "inband"
        excess = None if s.delay_us is None or not inband else s.delay_us - (s.floor_us or 0.0)
        out.append(localization.Observation(f"{f.host} {f.flow}", f.hops, excess, localization.INBAND,
                                            src=f.host, dst=f.peer, reach=f.reach,
                                            queued=s.network_slow if inband else None))
    return out


def located(slow: list[FlowStats], healthy: list[FlowStats], fabric: Fabric, limits: Thresholds,
            in_class: Callable[[Flow], bool] = lambda f: True) -> tuple[list[Hop], localization.Verdict]:
    """The hops of the suspect on the slow flows' paths where they wait most, all told (`waited`;
    among equals, the larger fitted queue, then the one localization ranks first) that no healthy
    sibling proves quiet; where no suspect is there, of its contested leads alike; [] where its
    evidence names none; narrowed where a link queues both ways (`both_ways`). A
    sibling's usual round trip narrows a suspect the one-way delays cannot tell apart, but never
    clears all of one: that inference yields to the queued delays measured across it."""
    verdict = localization.locate(observations(slow + healthy, fabric, limits))
    crossed, returned = crossed_quiet(healthy), returned_quiet(healthy, limits, in_class)
    on_paths = {h for s in slow for h in s.flow.may_cross()}
    for suspects in (verdict.suspects, verdict.contested):  # a contested lead only where no suspect is found
        found: list[tuple[bool, float, float, int, list[Hop]]] = []
        for rank, suspect in enumerate(suspects):
            hops = [h for h in suspect.hops if h in on_paths and h not in crossed]
            hops = [h for h in hops if h not in returned] or hops
            if hops:
                fitted = suspect.excess_us or 0.0
                wait = waited(fitted, hops, slow, limits, fabric.link_rates)
                # a queue none of them met ranks after every other; one none waits in, by rank alone
                found.append((wait is None, -(wait or 0.0), -fitted if wait else 0.0, rank, hops))
        if found:
            best = min(found)[-1]
            return both_ways(best, [h for *_, hops in found for h in hops], slow,
                             [s for s in verdict.suspects if (s.excess_us or 0.0) > limits.inband_margin_us]), verdict
    return [], verdict


def waited(fitted_us: float, hops: list[Hop], slow: list[FlowStats], limits: Thresholds,
           rates: dict[str, float]) -> float | None:
    """How long the slow flows that may cross `hops` wait in a queue fitted `fitted_us` deep there,
    all told. A queue delays every packet of its class across it, so a flow whose own in-band
    delay shows its queue waits there no more than the most it read; and where the queue stands
    far above that (twice and more, beyond the margin: localization's test for a second queue)
    the flow never met it: it took another path, or the queue is another class's (on a fabric with
    classes, best-effort probes wait where the jobs' class does not). The most, not the settled
    delay: a queue still growing is deeper when the mesh reads it than the flow's median. A flow
    with no delay of its own to show (held, or read from round trips) counts the queue as fitted.
    None where every flow across it shows it never met it."""
    total, met = 0.0, False
    for s in slow:
        if not any(h in hops for h in s.flow.may_cross()):
            continue
        read = [p.owd_us for p in s.flow.points if p.owd_us is not None]
        if s.delay_source != "inband" or s.held or not read:
            total, met = total + fitted_us, True
            continue
        own = max(max(read) - (s.floor_us or 0.0), 0.0)
        if fitted_us <= 2 * own + limits.margin_us("inband", s.flow.hops, rates):
            total, met = total + min(fitted_us, own), True
    return total if met else None


def both_ways(best: list[Hop], suspected: list[Hop], slow: list[FlowStats],
              suspects: Iterable[localization.Suspect]) -> list[Hop]:
    """A degraded link (a bad optic, a port negotiated down) slows both its directions. So: the
    links among the `suspected` hops held both ways that explain more of the flows whose own delay
    shows their queue (in-band, one way) than `best` does (flows crossing it opposite ways queue in
    suspects with nothing in common but that link: the one cause that explains them all is
    likelier than the one where a single flow waits most); else, where `best` spans links no path
    tells apart, those of them the `suspects` (each with a queue measured) hold the other way: of
    those holding any, the one the most queued paths show (a lone host link's fitted queue may be
    a slower link's seen from too few paths); else `best`."""
    queued = [s for s in slow if s.delay_source == "inband" and not s.held]

    def explained(hops: list[Hop]) -> int:
        return sum(1 for s in queued if any(h in hops for h in s.flow.may_cross()))
    ways: dict[str, list[Hop]] = {}
    for hop in dict.fromkeys(suspected):
        ways.setdefault(hop[0], []).append(hop)
    both = {name: explained(hops) for name, hops in ways.items() if len({w for _, w in hops if w}) > 1}
    top = max(both.values(), default=0)
    if top > explained(best):
        return [h for name, n in both.items() if n == top for h in ways[name]]

    def other_way(h: Hop) -> Hop:
        return h[0], ">".join(reversed(h[1].split(">")))
    ways_back = {other_way(h) for h in best if h[1]}
    holding = [s for s in suspects if ways_back & set(s.hops)]
    if not holding:
        return best
    strongest = max(holding, key=lambda s: len(s.queued))  # the first of equals: localization's rank
    back = [h for h in best if h[1] and other_way(h) in strongest.hops]
    return back if len({n for n, _ in back}) < len({n for n, _ in best}) else best
