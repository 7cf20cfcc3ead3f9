"""One random case of `bench rootcause`: a fabric, the jobs on it and one fault, drawn from
random.Random(seed + case). Pure: the draw names hosts, spines and links of the topology it
describes, and the case runner builds it.

The jobs' flows are placed so the fabric carries them without a queue (each directed link
under LOAD_SHARE of its rate, counting each flow at its nominal rate): whatever slows job A
(the job judged) is the fault drawn, or nothing. The fault acts on one flow of job A, the
victim, at a tier of its path; a class the drawn fabric cannot show at that tier (congestion on
a spine's down-link needs a third leaf to send from, a congestion needs culprits that can
overfill the link, a misconfigured class needs traffic classes) is drawn again."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

from clockfabric.topology import Topology, TrafficClasses, multirail

HOST_BPS, FABRIC_BPS = 100_000_000, 20_000_000
FLOW_BPS = 6_500_000  # a job flow's nominal rate, paced or bulk (lab.flows: 4 KiB / 5 ms; 16 KiB / 20 ms)
LOAD_SHARE = 0.5  # the jobs' nominal load on a directed link stays under this share of its rate: no queue
# a congestion fault offers its link at least this much over its rate (culprits at the most the
# links before it let through, plus job A's own load on it): one TCP flow on this 2-core machine
# carries 80-100 of a 100 Mbit/s host link, so one alone may fill no host link at all
OVERFILL = 1.2
STYLES = {"paced": {"chunk": 4096, "pause_s": 0.005}, "bulk": {"chunk": 16384, "pause_s": 0.02}}
HEALTHY = "healthy"
CLASSES = ("congestion_other_job", "congestion_non_job", "degraded_link", "flapping_link", "straggler_host",
           "misconfigured_class", "misconfigured_interface", HEALTHY)
TIERS = ("host->leaf", "leaf->spine", "spine->leaf", "leaf->host")
LINK_CLASSES = ("congestion_other_job", "congestion_non_job", "degraded_link", "flapping_link")
CULPRIT_JOB = "X"  # the job whose traffic congests, in congestion_other_job


@dataclass(frozen=True)
class FlowSpec:
    src: str
    dst: str
    spine: str  # the spine it is pinned on (its plane's)
    plane: int


@dataclass(frozen=True)
class JobSpec:
    jobid: str
    style: str  # paced or bulk
    flows: tuple[FlowSpec, ...]


@dataclass(frozen=True)
class Fault:
    kind: str
    tier: str  # one of TIERS, "host" for a host's fault, "-" for none
    victim: int | None = None  # index of the flow of job A it acts on
    link: str | None = None  # the link it acts on (a right verdict names it), None for a host's fault
    direction: str | None = None  # "from>to" nodes of the link the victim crosses
    host: str | None = None  # the host at fault (straggler, misconfigured), or a culprit's sender
    culprits: tuple[FlowSpec, ...] = ()  # congestion: the saturating flows; misconfigured: the rogue rank
    intensity: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    seed: int
    index: int
    hosts: int
    leaves: int
    spines: int
    planes: int
    classes: bool
    jobs: tuple[JobSpec, ...]
    fault: Fault

    def topology(self) -> Topology:
        return shape(self.hosts, self.leaves, self.spines, self.planes, self.classes)

    def row(self) -> dict:
        """Enough to replay it: `draw(seed, index)` gives it again; the rest says what it is."""
        return asdict(self)


def shape(hosts: int, leaves: int, spines: int, planes: int, classes: bool) -> Topology:
    topo = multirail(hosts, planes, leaves, spines, host_rate=f"{HOST_BPS // 10**6}mbit",
                     fabric_rate=f"{FABRIC_BPS // 10**6}mbit", name=f"rootcause-{hosts}")
    if classes:
        import dataclasses

        topo = dataclasses.replace(topo, classes=TrafficClasses())
    return topo


def switch(planes: int, plane: int, role: str, i: int) -> str:
    """A switch's name as multirail names it."""
    return f"{role}{i}" if planes == 1 else f"p{plane}-{role}{i}"


def leaf_of(host: str, hosts: int, leaves: int) -> int:
    return int(host[1:]) * leaves // hosts


def under(leaf: int, hosts: int, leaves: int) -> list[str]:
    return [f"h{i}" for i in range(hosts) if i * leaves // hosts == leaf]


def hops(f: FlowSpec, hosts: int, leaves: int, planes: int) -> list[tuple[str, str]]:
    """The directed links (from, to) the flow crosses, in order: host, leaf, spine, leaf, host."""
    a = switch(planes, f.plane, "leaf", leaf_of(f.src, hosts, leaves))
    b = switch(planes, f.plane, "leaf", leaf_of(f.dst, hosts, leaves))
    if a == b:
        return [(f.src, a), (a, f.dst)]
    return [(f.src, a), (a, f.spine), (f.spine, b), (b, f.dst)]


def link_name(topo: Topology, a: str, b: str) -> str:
    return next(lk.name for lk in topo.links if {lk.a.node, lk.b.node} == {a, b})


def twins(case: Case, hop: tuple[str, str]) -> set[tuple[str, str]]:
    """The directed links that exactly the fabric's paths across `hop` cross (`hop` among them):
    no end-to-end delay, whoever sends it, tells them apart. With two leaves, a leaf's way up to a
    spine and that spine's way down to the other leaf are one such pair."""
    names = [f"h{i}" for i in range(case.hosts)]
    crossing: dict[tuple[str, str], set[int]] = {}
    n = 0
    for plane in range(case.planes):
        for src in names:
            for dst in (d for d in names if d != src):
                same = leaf_of(src, case.hosts, case.leaves) == leaf_of(dst, case.hosts, case.leaves)
                for spine in [""] if same else [switch(case.planes, plane, "spine", k) for k in range(case.spines)]:
                    n += 1
                    for h in hops(FlowSpec(src, dst, spine, plane), case.hosts, case.leaves, case.planes):
                        crossing.setdefault(h, set()).add(n)
    return {h for h, paths in crossing.items() if paths == crossing.get(hop)} | {hop}


def tier_of(a: str, b: str) -> str:
    """The tier of the directed link a -> b, from its ends' names."""
    def role(n: str) -> str:
        return "spine" if "spine" in n else "leaf" if "leaf" in n else "host"

    return f"{role(a)}->{role(b)}"


def draw(seed: int, index: int) -> Case:
    rng = random.Random(seed + index)
    hosts, leaves, spines, planes = rng.randint(4, 12), rng.randint(2, 4), rng.randint(2, 4), rng.randint(1, 2)
    classes = rng.random() < 0.5
    jobs = _jobs(rng, hosts, leaves, spines, planes)
    fault = _fault(rng, hosts, leaves, spines, planes, classes, jobs[0])
    return Case(seed, index, hosts, leaves, spines, planes, classes, jobs, fault)


def _jobs(rng: random.Random, hosts: int, leaves: int, spines: int, planes: int) -> tuple[JobSpec, ...]:
    """1-3 jobs of 3-8 flows (A paced, the others paced or bulk), each between hosts under different
    leaves on the job's plane; a flow
    that no spine carries under LOAD_SHARE is drawn again (and left out after 50 tries)."""
    load: dict[tuple[str, str], float] = {}
    jobs = []
    for j in range(rng.randint(1, 3)):
        # A, the job judged, is paced: a bulk flow's own 16 KiB bursts queue ~2 ms at a leaf's
        # 20 Mbit/s uplink (5x slower than the host's), so job why never calls a bulk job healthy here
        plane, style = rng.randrange(planes), "paced" if j == 0 else rng.choice(sorted(STYLES))
        flows: list[FlowSpec] = []
        for _ in range(rng.randint(3, 8)):
            for _try in range(50):
                src, dst = rng.sample([f"h{i}" for i in range(hosts)], 2)
                # one flow a pair in a job: the agents report a job's connections between two
                # addresses as one flow group, judged as one
                if leaf_of(src, hosts, leaves) == leaf_of(dst, hosts, leaves) or (src, dst) in {
                        (f.src, f.dst) for f in flows}:
                    continue
                f = FlowSpec(src, dst, switch(planes, plane, "spine", rng.randrange(spines)), plane)
                path = hops(f, hosts, leaves, planes)
                if all(load.get(h, 0.0) + FLOW_BPS <= LOAD_SHARE * _rate(h) for h in path):
                    for h in path:
                        load[h] = load.get(h, 0.0) + FLOW_BPS
                    flows.append(f)
                    break
        jobs.append(JobSpec("ABC"[j], style, tuple(flows)))
    return tuple(jobs)


def _rate(hop: tuple[str, str]) -> float:
    return HOST_BPS if "host" in tier_of(*hop) else FABRIC_BPS


def _fault(rng: random.Random, hosts: int, leaves: int, spines: int, planes: int, classes: bool,
           job: JobSpec) -> Fault:
    topo = shape(hosts, leaves, spines, planes, classes)
    found = None
    for _ in range(100):
        kind = rng.choice(CLASSES)
        if kind == HEALTHY:
            return Fault(HEALTHY, "-")
        for _try in range(20):  # another victim and tier before another class
            victim = rng.randrange(len(job.flows))
            v = job.flows[victim]
            found = _at(rng, kind, v, hosts, leaves, planes, classes, job)
            if found is not None:
                break
        if found is None:
            continue
        tier, link, culprits, intensity = found
        if link is None:
            return Fault(kind, tier, victim, host=v.src, culprits=culprits, intensity=intensity)
        return Fault(kind, tier, victim, link_name(topo, *link), f"{link[0]}>{link[1]}",
                     culprits[0].src if culprits else None, culprits, intensity)
    raise AssertionError("no fault could be drawn")  # healthy is always drawable: unreachable


def _at(rng: random.Random, kind: str, v: FlowSpec, hosts: int, leaves: int, planes: int, classes: bool,
        job: JobSpec):
    """Where `kind` acts on victim `v` and how hard: (tier, directed link or None, culprit flows,
    intensity); None where this fabric cannot show it there."""
    if kind == "straggler_host":
        others = {f.src for f in job.flows} - {v.src}
        return ("host", None, (), {"stopped": "every sender of job A on the host"}) if others else None
    if kind == "misconfigured_class":
        return ("host", None, (FlowSpec(v.src, v.dst, v.spine, v.plane),), {"dscp": 0}) if classes else None
    if kind == "misconfigured_interface":
        if planes < 2:
            return None
        other = 1 - v.plane
        return ("host", None, (FlowSpec(v.src, v.dst, switch(planes, other, "spine", 0), other),), {"plane": other})
    path = hops(v, hosts, leaves, planes)
    tier_index = rng.randrange(len(TIERS))
    link = path[tier_index]
    tier = TIERS[tier_index]
    if kind == "degraded_link":
        return tier, link, (), {"rate_bps": rng.choice([1_000_000, 2_000_000, 3_000_000])}
    if kind == "flapping_link":
        return tier, link, (), {"down_s": rng.choice([0.5, 1.0, 1.5]), "up_s": 1.0, "count": rng.randint(2, 3)}
    crossed = {h for f in job.flows for h in hops(f, hosts, leaves, planes)}
    senders = [c for c in _culprit_senders(tier, v, hosts, leaves, planes)
               if _queues_only_at(hops(c, hosts, leaves, planes), link, crossed)]
    if not senders:
        return None
    n = rng.randint(1, 2)
    culprits = tuple(rng.choice(senders) for _ in range(n))
    own = sum(FLOW_BPS for f in job.flows if link in hops(f, hosts, leaves, planes))
    load = offered([hops(c, hosts, leaves, planes) for c in culprits], link) + own
    if load <= OVERFILL * _rate(link):
        return None  # they could not fill it: the queue would stand before it, or nowhere
    return tier, link, culprits, {"saturating_flows": n}


def offered(paths: list[list[tuple[str, str]]], target: tuple[str, str]) -> float:
    """The most that flows on `paths` can bring to `target`: each no more than the slowest link
    before it, and flows that share a link before it no more than that link's rate together."""
    return _through([list(reversed(p[:p.index(target)])) for p in paths])


def _through(before: list[list[tuple[str, str]]]) -> float:
    """What flows can bring to a point, each given by the links before it, the nearest first."""
    if any(not b for b in before):
        return float("inf")  # a flow sent from the point itself: nothing before it limits it
    groups: dict[tuple[str, str], list[list[tuple[str, str]]]] = {}
    for b in before:
        groups.setdefault(b[0], []).append(b[1:])
    return sum(min(_rate(hop), _through(rest)) for hop, rest in groups.items())


def _queues_only_at(path: list[tuple[str, str]], target: tuple[str, str], crossed: set) -> bool:
    """Whether a saturating flow on `path` queues job A at `target` alone: every other link of
    it that job A crosses is upstream and faster than `target` (it cannot fill those)."""
    at = path.index(target)
    return all(h == target or h not in crossed or (k < at and _rate(h) > _rate(target))
               for k, h in enumerate(path))


def _culprit_senders(tier: str, v: FlowSpec, hosts: int, leaves: int, planes: int) -> list[FlowSpec]:
    """Saturating flows whose first queue is the victim's link at `tier`: sharing only that link
    of the victim's path upstream of it (a queue forms at the first link they overfill)."""
    ls, ld = leaf_of(v.src, hosts, leaves), leaf_of(v.dst, hosts, leaves)
    if tier == "host->leaf":  # from the victim's host to a neighbour under its leaf: 100 Mbit/s, no spine
        return [FlowSpec(v.src, h, "", v.plane) for h in under(ls, hosts, leaves) if h != v.src]
    if tier == "leaf->host":  # to the victim's peer from a neighbour under its leaf
        return [FlowSpec(h, v.dst, "", v.plane) for h in under(ld, hosts, leaves) if h != v.dst]
    if tier == "leaf->spine":  # from under the victim's leaf, over its spine, to any other leaf
        return [FlowSpec(a, b, v.spine, v.plane) for a in under(ls, hosts, leaves)
                for b in (f"h{i}" for i in range(hosts)) if leaf_of(b, hosts, leaves) != ls]
    # spine->leaf: from a third leaf over the victim's spine to its peer's leaf
    return [FlowSpec(a, b, v.spine, v.plane) for a in (f"h{i}" for i in range(hosts))
            if leaf_of(a, hosts, leaves) not in (ls, ld) for b in under(ld, hosts, leaves)]
