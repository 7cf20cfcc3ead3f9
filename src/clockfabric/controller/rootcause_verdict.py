"""One verdict for a job over a window, in one sentence, with its evidence. Pure (see rootcause).

In order, the first that holds:
  misconfigured (class)      a flow's DSCP is not the fabric's collective class
  misconfigured (interface)  a flow leaves on no fabric NIC, or off the plane the job's others share
  flapping link X            link events on a link the job's flows may cross, while it suffers;
                             or two downs or more
  held, not located          network-slow flows that only their waiting data or lost segments
                             show, for less time than a delay takes to show where (provisional)
  degraded link X            network-slow flows, and the hop that explains them: located from the
                             probe mesh and the in-band delays (localization) where that evidence
                             names one on their paths (where they wait most), else the hop they
                             share that no healthy sibling crosses; queueing while carrying under
                             half its configured rate, the queue older than a new flow's load takes
                             to be seen; younger, the queue is unexplained as yet (a provisional
                             verdict: asked again, it names one)
  congestion ... on link X   ... carrying half its rate or more: loaded by another job, by flows of
                             no job, or by the job.
                             Where no evidence tells the candidate hops apart (the same probes queue
                             across them, the same load crosses them), all are named, as ambiguous
  straggler host H           no flow slow in the network; the starved flows all leave one host
  rate unexplained           a flow far under its siblings' rate whose send queue went unread (its
                             host's readings came late): neither held nor idle as far as is known
                             (provisional)
  healthy                    not the network: every flow at its floor
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from clockfabric.controller.rootcause import (
    Flow,
    FlowStats,
    Hop,
    LinkEvent,
    Thresholds,
    job_flows,
    load_on,
    on_hop,
    recent_width,
)
from clockfabric.controller.rootcause_fabric import Fabric, located, probes_queued
from clockfabric.controller.rootcause_pace import late_hosts, throughput, throughput_drop
from clockfabric.controller.rootcause_siblings import acks_in_class, blame

VERDICTS = ("misconfigured_class", "misconfigured_interface", "flapping_link", "congestion_other_job",
            "congestion_non_job", "congestion_own", "degraded_link", "queue_unexplained", "held_unlocated",
            "slow_unlocated", "straggler_host", "rate_unexplained", "healthy", "no_flows")
PROVISIONAL = ("queue_unexplained", "held_unlocated", "rate_unexplained")  # "not yet": the next asking may name a cause
SUFFERING_DROP = 0.8  # the job's throughput under this share of its start: it suffers
FLAP_EVENTS = 2  # transitions on one link in the window that make it flapping
FLAP_DOWNS = 2  # downs of one link in the window that make it flapping even once the job has caught up
SAME_EVENT_NS = 500_000_000  # one down seen from both ends of the link lands this close


def why(jobid: str, flows: list[Flow], fabric: Fabric, now_ns: int, window_ns: int,
        limits: Thresholds | None = None) -> dict:
    """The verdict for `jobid` over (now - window, now]: {verdict, sentence, link, links, culprit,
    evidence}. `links` is every link it names; `link` is that link where it names one alone, None
    where it names several (ambiguous) or none."""
    limits = limits or Thresholds()
    since = now_ns - window_ns
    recent = max(since, now_ns - recent_width([f for f in flows if f.jobid == jobid], limits))
    stats = job_flows(flows, jobid, since, recent, limits, fabric.floors, fabric.link_rates)
    series = throughput([f for f in flows if f.jobid == jobid and f.points])
    drop = throughput_drop([(t, v) for t, v in series if t >= since])
    base = {"jobid": jobid, "since_ns": since, "now_ns": now_ns, "throughput": series, "throughput_ratio": drop,
            "flows": [s.row() for s in stats], "late": late_hosts(stats, now_ns)}
    if not stats:
        return {**base, **_verdict("no_flows", f"job {jobid} sent nothing the agents saw in the window")}
    found = (_misconfigured(stats, fabric) or _flapping(stats, fabric, since, drop)
             or _network(jobid, stats, flows, fabric, recent, now_ns, limits) or _straggler(stats)
             or _unread(jobid, stats) or _healthy(stats))
    return {**base, **found}


def _verdict(kind: str, sentence: str, link: str | list[str] | None = None, culprit: str | None = None,
             evidence: dict | None = None) -> dict:
    """`link`: the one link named, or every link the evidence cannot tell apart."""
    links = [] if link is None else [link] if isinstance(link, str) else list(link)
    return {"verdict": kind, "sentence": sentence, "link": links[0] if len(links) == 1 else None, "links": links,
            "ambiguous": len(links) > 1, "culprit": culprit, "evidence": evidence or {}}


def _names(stats: list[FlowStats]) -> list[str]:
    return [f"{s.flow.host} {s.flow.flow}" for s in stats]


def _misconfigured(stats: list[FlowStats], fabric: Fabric) -> dict | None:
    wanted = fabric.collective_dscp
    if wanted:
        wrong = [s for s in stats if any(m not in wanted for m in s.flow.marks())]
        if wrong:
            marks = sorted({m for s in wrong for m in s.flow.marks() if m not in wanted})
            return _verdict("misconfigured_class",
                            f"misconfigured job: {len(wrong)} of its flows mark DSCP {', '.join(map(str, marks))}, "
                            f"not the collective class ({', '.join(map(str, wanted))}): they queue with best-effort "
                            "traffic",
                            evidence={"flows": _names(wrong), "dscp": marks, "collective_dscp": list(wanted)})
    planes = Counter(s.flow.plane for s in stats)
    plane, n = planes.most_common(1)[0]
    if plane is None or n * 2 <= len(stats):
        return None  # no plane most flows share: nothing to call wrong
    off = [s for s in stats if s.flow.plane != plane]
    if not off:
        return None
    where = ", ".join(f"{s.flow.host} {s.flow.flow} on " + ("no fabric NIC" if s.flow.plane is None
                                                           else f"plane {s.flow.plane}") for s in off)
    return _verdict("misconfigured_interface",
                    f"misconfigured job: {len(off)} flows leave on the wrong interface ({where}); "
                    f"its other flows use plane {plane}", evidence={"flows": _names(off), "plane": plane})


def _flapping(stats: list[FlowStats], fabric: Fabric, since: int, drop: float | None) -> dict | None:
    """Downs and ups of a link the flows may cross, while the job suffers; or repeated downs, which
    stall its flows each time even where they have caught up by the time it is asked."""
    suffering = any(s.network_slow or s.starved for s in stats) or (drop is not None and drop < SUFFERING_DROP)
    crossed = {name for s in stats for name, _ in s.flow.may_cross()}
    recent = [e for e in fabric.events if e.t_ns >= since]
    per_link = Counter(e.link for e in recent if e.link in crossed and e.kind in ("link_down", "link_up"))
    downs = Counter(e.link for e in first_seen([e for e in recent if e.link in crossed and e.kind == "link_down"]))
    if not per_link or per_link.most_common(1)[0][1] < FLAP_EVENTS:
        return None
    link, count = per_link.most_common(1)[0]
    if not suffering and downs[link] < FLAP_DOWNS:
        return None
    failovers = [e for e in recent if e.kind.startswith("failover")]
    hit = [s for s in stats if any(name == link for name, _ in s.flow.may_cross())]
    return _verdict("flapping_link",
                    f"flapping link {link}: {count} downs and ups in the window, {len(failovers)} failovers; "
                    f"{len(hit)} of the job's flows cross it", link,
                    evidence={"events": [[e.t_ns, e.link, e.kind] for e in recent if e.link == link or e in failovers],
                              "flows": _names(hit), "throughput_ratio": drop})


def first_seen(events: list[LinkEvent], apart_ns: int = SAME_EVENT_NS) -> list[LinkEvent]:
    """One of each event both ends of a link report: the first, where the next of its kind on the
    link comes within `apart_ns`."""
    kept: list[LinkEvent] = []
    last: dict[tuple[str, str], int] = {}
    for e in sorted(events, key=lambda e: e.t_ns):
        if e.t_ns - last.get((e.link, e.kind), -apart_ns - 1) > apart_ns:
            kept.append(e)
        last[(e.link, e.kind)] = e.t_ns
    return kept


def _network(jobid: str, stats: list[FlowStats], flows: list[Flow], fabric: Fabric, since: int, now_ns: int,
             limits: Thresholds) -> dict | None:
    slow = [s for s in stats if s.network_slow]
    if not slow:
        return None
    evidence: dict[str, object] = {"slow_flows": [s.row() for s in slow]}
    age_ns = queue_age_ns(slow, now_ns)
    if all(s.held for s in slow) and age_ns is not None and age_ns < limits.unseen_ns:
        # no delay shows where they wait: it may not have yet
        return _verdict("held_unlocated", f"{len(slow)} of job {jobid}'s flows are held back by the network "
                        f"({slow[0].why[-1]}), and no delay shows where yet ({age_ns / 1e9:.1f} s)",
                        evidence=evidence | {"held_s": round(age_ns / 1e9, 2)})
    if age_ns is not None:  # the mesh's evidence of this queue: what it read since the queue began
        fabric = fabric.read_since(now_ns - age_ns)
    healthy = [s for s in stats if not s.network_slow]
    in_class = acks_in_class(flows, fabric.collective_dscp is not None)
    hops, verdict = located(slow, healthy, fabric, limits, in_class)
    evidence["localization"] = verdict.row()
    if not hops:  # the mesh names nothing on their paths: the siblings' evidence alone
        hops = blame(slow, healthy, limits, in_class)
    if not hops:
        return _verdict("slow_unlocated", f"{len(slow)} flows of job {jobid} are slow in the network "
                        f"({'; '.join(slow[0].why)}), but no link they share can be named", evidence=evidence)

    # what loads a link while it queues: the load since the queue began (a flow that started with
    # it counts in full, one that left before it not at all), not over the whole window
    loaded_since = since if age_ns is None else max(since, now_ns - age_ns)

    def load(hop: Hop) -> dict[str | None, float]:
        return load_on(hop, flows, loaded_since)

    def foreign(hop: Hop) -> float:
        """Others' load on the hop: what their flows reported, and on a host's own link what its
        NIC counted beyond every flow reported, where that is a load (a flow not reported yet; a
        trickle beyond them is the host's ACKs and probes)."""
        on = load(hop)
        rate = fabric.link_rates.get(hop[0])
        unseen = (fabric.nic_bps(hop, loaded_since) or 0.0) - sum(on.values())
        seen = sum(v for j, v in on.items() if j != jobid)
        return seen + (unseen if rate and unseen >= limits.busy_share * rate else 0.0)

    # the suspect probes see queueing across most (the queue itself, whoever sends), then the one
    # others load most (a hint: a load may not be what queues, or be seen before the culprit's).
    # Hops no such evidence tells apart are all named: the first on the way would be a guess.
    order = {h: i for s in reversed(slow) for i, h in enumerate(s.flow.may_cross())}

    def evidence_of(h: Hop) -> tuple[int, float]:
        return probes_queued(h, fabric, limits), foreign(h)

    ranked = sorted(hops, key=lambda h: (*(-x for x in evidence_of(h)), order.get(h, len(order))))
    hop, best = ranked[0], evidence_of(ranked[0])
    named = [h for h in ranked if tied(evidence_of(h), best)]
    # of links no evidence tells apart, the class is read where the load fills most: a load that
    # fills one of them explains the queue there, though it is a small share of a faster one
    hop = max(named, key=lambda h: fullness(h, fabric.link_rates, lambda k: sum(load(k).values())))
    on_link = with_unseen(load(hop), fabric.nic_bps(hop, loaded_since))
    rate = fabric.link_rates.get(hop[0])
    others = {j: v for j, v in on_link.items() if j not in (jobid, None)}
    non_job, total = on_link.get(None, 0.0), sum(on_link.values())
    busy = limits.busy_share * rate if rate else 0.0
    top_other = max(others, key=lambda j: others[j]) if others else None
    here = queue_age_ns([s for s in slow if on_hop(hop, s.flow.may_cross())], now_ns)
    if rate and total < limits.degraded_share * rate:
        # a load fills the link it queues (congestion offers more than its rate): one that queues
        # under half its rate drains slower than it says, whoever's traffic it carries. The load
        # that explains a young queue may be a flow not reported yet.
        kind, culprit = "queue_unexplained" if here is not None and here < limits.unseen_ns else "degraded_link", None
    elif top_other is not None and others[top_other] >= max(busy, non_job):
        kind, culprit = "congestion_other_job", top_other
    elif non_job >= busy and non_job > 0:
        kind, culprit = "congestion_non_job", "(no job)"
    else:
        kind, culprit = "congestion_own", jobid
    if kind.startswith("congestion"):  # a load that fills a link queues where it is fullest
        named = filled(named, fabric.link_rates, lambda h: sum(load(h).values()))
        hop, on_link = named[0], with_unseen(load(named[0]), fabric.nic_bps(named[0], loaded_since))
        rate, non_job, total = fabric.link_rates.get(hop[0]), on_link.get(None, 0.0), sum(on_link.values())
    own = on_link.get(jobid, 0.0)
    names = list(dict.fromkeys(h[0] for h in named))
    link: str | list[str] = names if len(names) > 1 else hop[0]
    where = " or ".join(f"{n} ({w.replace('>', ' -> ')})" if w else n for n, w in named)
    if len(names) > 1:
        where += " (the evidence cannot tell them apart)"
        evidence["candidates"] = [{"link": n, "direction": w.replace(">", "->") or None,
                                   "probes_queued": evidence_of((n, w))[0], "foreign_bps": evidence_of((n, w))[1]}
                                  for n, w in named]
    evidence |= {"direction": hop[1] or None, "link_rate_bps": rate, "load_since_ns": loaded_since,
                 "load_bps": {("(no job)" if j is None else j): v for j, v in on_link.items()},
                 "nic_bps": fabric.nic_bps(hop, loaded_since)}
    lead = f"{len(slow)} of job {jobid}'s flows are slow ({slow[0].why[0]})"
    if kind == "congestion_other_job":
        sentence = (f"congestion from job {culprit} on link {where}: {lead}; "
                    f"{culprit} sends {on_link.get(culprit, 0.0) / 1e6:.0f} Mbit/s over it")
    elif kind == "congestion_non_job":
        sentence = (f"congestion from traffic of no job on link {where}: {lead}; "
                    f"flows of no job send {non_job / 1e6:.0f} Mbit/s over it")
    elif kind == "queue_unexplained":
        age_s = (here or 0) / 1e9
        evidence["queue_age_s"] = round(age_s, 2)
        sentence = (f"link {where} queues: {lead}; the {total / 1e6:.0f} Mbit/s seen on it of its "
                    f"{(rate or 0) / 1e6:.0f} Mbit/s do not explain it yet, and the queue ({age_s:.1f} s) is "
                    f"younger than a new flow's load takes to be seen ({limits.unseen_ns / 1e9:.0f} s)")
    elif kind == "degraded_link":
        sentence = (f"degraded link {where}: {lead}, yet it carries only {total / 1e6:.0f} Mbit/s of its "
                    f"configured {(rate or 0) / 1e6:.0f} Mbit/s")
    else:
        sentence = (f"congestion on link {where} from job {jobid}'s own flows: {lead}; "
                    f"they send {own / 1e6:.0f} Mbit/s over it")
    return _verdict(kind, sentence, link, culprit, evidence)


def with_unseen(on_link: dict[str | None, float], nic_bps: float | None) -> dict[str | None, float]:
    """The load on a link with what the NIC at its host's end counted beyond the flows reported
    (a flow whose report has not reached the engine yet): of no job, as far as anyone can tell."""
    unseen = (nic_bps or 0.0) - sum(on_link.values())
    return on_link if unseen <= 0 else {**on_link, None: on_link.get(None, 0.0) + unseen}


def fullness(hop: Hop, rates: dict[str, float], total: Callable[[Hop], float]) -> float:
    """All the load on a hop over its configured rate; 0 where the rate is unknown."""
    rate = rates.get(hop[0])
    return total(hop) / rate if rate else 0.0


def filled(hops: list[Hop], rates: dict[str, float], total: Callable[[Hop], float]) -> list[Hop]:
    """Of hops in the order of the way, where a load that fills a link queues: the fullest
    (`fullness` within a tenth of the fullest), then `upstream` of those. A hop of unknown rate is kept."""
    full = {h: fullness(h, rates, total) for h in hops if rates.get(h[0])}
    top = max(full.values(), default=0.0)
    return upstream([h for h in hops if h not in full or full[h] >= 0.9 * top], rates)


def upstream(hops: list[Hop], rates: dict[str, float]) -> list[Hop]:
    """Of hops in the order of the way that the same load crosses, those where that load can
    queue: a link downstream of one no faster than itself gets what that one lets through, no more
    than it drains. A link of unknown rate is kept. (A degraded link drains less than its rate
    says, so this holds for a load that fills a link, not for one that carries little.)"""
    kept: list[Hop] = []
    for hop in hops:
        rate = rates.get(hop[0])
        if not any(rate is not None and (r := rates.get(k[0])) is not None and r <= rate for k in kept):
            kept.append(hop)
    return kept


def tied(a: tuple[int, float], b: tuple[int, float]) -> bool:
    """Two hops' evidence (probe paths queued across them, others' load on them) the same: the same
    probes, and loads within a tenth of each other (the same flows cross both) or both negligible."""
    return a[0] == b[0] and abs(a[1] - b[1]) <= max(0.1 * max(a[1], b[1]), 1e5)


def queue_age_ns(slow: list[FlowStats], now_ns: int) -> int | None:
    """How long the oldest of these flows' queues (or holds) has stood; None where none is timed."""
    began = [s.queued_since_ns for s in slow if s.queued_since_ns is not None]
    return now_ns - min(began) if began else None


def _straggler(stats: list[FlowStats]) -> dict | None:
    starved = [s for s in stats if s.starved]
    hosts = {s.flow.host for s in starved}
    if len(hosts) != 1:
        return None
    host = hosts.pop()
    if any(not s.starved for s in stats if s.flow.host == host):
        return None  # some of its flows keep pace: not the host
    return _verdict("straggler_host", f"not the network: straggler host {host}: its {len(starved)} flows idle "
                    "while their delay sits at the floor, and the other ranks wait for it", culprit=host,
                    evidence={"flows": _names(starved), "why": [w for s in starved for w in s.why]})


def _unread(jobid: str, stats: list[FlowStats]) -> dict | None:
    """Flows far under their siblings' rate that are neither held nor idle as far as is read: their
    send queues went unread in their newest readings. Idle is read, never assumed: a host whose
    readings come late (its pushes cross the very link that slows it) may be held by the network."""
    unread = [s for s in stats if s.why and not s.network_slow and not s.starved]
    if not unread:
        return None
    first = unread[0]
    return _verdict("rate_unexplained", f"{len(unread)} of job {jobid}'s flows run far under their siblings' rate "
                    f"({first.why[-1]}), and what waits to be sent has not been read in their newest "
                    f"readings ({first.flow.host}'s came {len(first.flow.points)} in the span judged): not yet judged",
                    evidence={"flows": _names(unread), "readings": [len(s.flow.points) for s in unread]})


def _healthy(stats: list[FlowStats]) -> dict:
    delays = sorted(s.delay_us for s in stats if s.delay_us is not None)
    mid = f", median delay {delays[len(delays) // 2]:.0f} us" if delays else ""
    return _verdict("healthy", f"not the network: all {len(stats)} flows at their floor{mid}, none far from "
                    "its siblings", evidence={"flows": len(stats)})
