"""What the root cause reads, turned from stored samples and events into its model; and the route
`GET /api/v1/jobs/{jobid}/why?since=5m`.

Flows come from the workload pushes: the job's own over the window (`job_flow_*`, labelled
`jobid`, read by the job's index), and of every other job's flow and the busy flows of no job
(`other_flow_*`) only their rate and path over the window's latest readings (`rootcause.recent_width`): that
is all a verdict reads of them (the load they put on a link, rootcause.load_on). Of those, only
the flows with an end on a host near the job's (on a switch one of them is cabled to): on a
leaf-spine, every flow that crosses a link the job's flows cross has one, and what is read
grows with the job, not with the fleet. A flow's
links: its plane from its local address, its peer from its remote one, and the switch it
crosses where its agent traced it (`job_flow_path` / `other_flow_path`, label `via`); without
one, or with several in the window, only the links every such path shares surely. Probe floors
and their links: the OWD matrix and the path map. On a fabric with traffic classes, the class
stream's delays (`class_owd_p50_ns`: probes marked with the jobs' class, on the same paths) beside
the same floors.

A packet is timed leaving after its host's own egress queue (the qdisc of its NIC), so every
delay measured from a host, in-band or probe, misses the queue on the host's link to its leaf.
The agents report that queue (`nic_egress_queue_ns`), and it is added back to each delay from the
host over that link: where the host sorts its packets into classes by DSCP, the queue of a
flow's own class, and none to its probes (the priority class holds only them); else the
whole queue; to the class stream's, its class's.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import replace
from itertools import pairwise

from fastapi import APIRouter, HTTPException, Query

from clockfabric.controller import jobs
from clockfabric.controller.detectors.base import LinkIndex
from clockfabric.controller.detectors.congestion import orient
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.rootcause import (
    FALLBACK,
    READINGS,
    Flow,
    Hop,
    LinkEvent,
    ProbePath,
    Thresholds,
    point,
    reading,
    recent_width,
)
from clockfabric.controller.rootcause_fabric import Fabric
from clockfabric.controller.rootcause_verdict import why
from clockfabric.controller.series.promql import SLICE_NAMES_BYTES, alternations
from clockfabric.controller.series.read import Exported, Series
from clockfabric.controller.series.sample import Sample
from clockfabric.controller.storage.base import Event, Storage
from clockfabric.errors import ClockfabricError
from clockfabric.serieswire import HOST
from clockfabric.topology import Topology, interfaces
from clockfabric.units import parse_duration
from clockfabric.workload.flowgroups import parse_pair
from clockfabric.workload.samples import EGRESS, NIC_BPS

# sample name -> FlowPoint field; a flow of no job is pushed as other_flow_<stat>
PATH_STAT = "path"  # value: unused; labels: via (the switch the flow crosses), dscp where known
CLASS_DELAY = "class_owd_p50_ns"  # the class stream's delays (the agent's clock service)
PAGE = 5_000
MAX_SAMPLES = 500_000  # a window this busy is cut short rather than hold the controller


def stored_events(storage: Storage, since_ns: int) -> list[Event]:
    out: list[Event] = []
    after = 0
    while len(out) < MAX_SAMPLES:
        page = storage.events(since_ns=since_ns, after_id=after, limit=1000)
        out += page
        if len(page) < 1000 or page[-1].id is None:
            return out
        after = page[-1].id
    return out


class Places:
    """Addresses to hosts and planes, and the links a flow crosses, from the topology. Building
    one and naming a flow's links walk the whole topology: `PlacesCache` keeps one for each request."""

    def __init__(self, topology: Topology | None, host_addresses: dict[str, str]):
        self.topology = topology
        self.host_addresses = dict(host_addresses)
        self._hops: dict[tuple, tuple] = {}  # (host, peer, plane, via) -> hops: the topology does not change
        self._cabled: dict[str, set[str]] | None = None  # Places.near's index
        self.links = LinkIndex(topology)
        self.by_address = dict(host_addresses)  # address -> host
        self.port_of = {str(i.address.ip): p for p, i in interfaces(topology).items()} if topology else {}
        if topology:
            self.by_address |= {a: p.node for a, p in self.port_of.items() if p.node in topology.hosts}
            self.by_address |= {str(h.address): name for name, h in topology.hosts.items()}

    def plane(self, host: str, address: str, via: str | None) -> int | None:
        """The plane of the NIC that owns `address`; for another address of the host (its own,
        routed over the fabric), the plane of the switch it was traced through, or its only one."""
        topo = self.topology
        if topo is None or host not in topo.hosts:
            return None
        port = self.port_of.get(address)
        if port is not None:
            return topo.plane_of(port) if port.node == host else None
        if address != str(topo.hosts[host].address):
            return None
        if via in topo.switches:
            return topo.switches[via].plane
        planes = {n.plane for n in topo.hosts[host].nics}
        return planes.pop() if len(planes) == 1 else None

    def hops(self, host: str, peer: str | None, plane: int | None, via: str | None) -> tuple:
        topo = self.topology
        if topo is None or peer not in topo.hosts or host not in topo.hosts or plane is None:
            return ()
        key = (host, peer, plane, via)
        if key not in self._hops:
            names = topo.links_through(host, peer, plane, via if via in topo.switches else None)
            hops = tuple(orient(self.links, host, names))
            if any(not way for _, way in hops):  # untraced: its links do not chain; a whole path gives their way
                ways = dict(self.reach(host, peer, plane, None))
                hops = tuple((name, way or ways.get(name, "")) for name, way in hops)
            self._hops[key] = hops
        return self._hops[key]

    def reach(self, host: str, peer: str | None, plane: int | None, via: str | None) -> tuple:
        """Every hop of every path the flow may take, in order from host: () where its switch is
        traced (its hops say it all) or nothing is known of its ends."""
        topo = self.topology
        if topo is None or peer not in topo.hosts or host not in topo.hosts or plane is None or via in topo.switches:
            return ()
        key = (host, peer, plane, None, "reach")
        if key not in self._hops:
            placed: dict[Hop, int] = {}
            for path in topo.paths(host, peer):
                if path.plane != plane:
                    continue
                for i, step in enumerate(pairwise(path.nodes)):
                    try:
                        placed.setdefault((topo.find_link(*step).name, f"{step[0]}>{step[1]}"), i)
                    except KeyError:  # parallel cables: which one is not known
                        pass
            self._hops[key] = tuple(sorted(placed, key=lambda h: (placed[h], h)))
        return self._hops[key]

    def addresses(self, hosts: Iterable[str]) -> list[str]:
        """Every address of `hosts` (their NICs' and their own), sorted."""
        wanted = set(hosts)
        return sorted(a for a, h in self.by_address.items() if h in wanted)

    def near(self, hosts: Iterable[str]) -> list[str]:
        """`hosts` and every host on a switch one of them is cabled to: whose probes cross the
        links `hosts`' flows cross (the leaves' uplinks and downlinks, the hosts' own links)."""
        topo = self.topology
        if topo is None:
            return sorted(set(hosts))
        if self._cabled is None:  # host -> its switches, switch -> its hosts: built once
            self._cabled = {}
            for lk in topo.links:
                for a, b in ((lk.a.node, lk.b.node), (lk.b.node, lk.a.node)):
                    if (a in topo.hosts) != (b in topo.hosts):
                        self._cabled.setdefault(a, set()).add(b)
        return sorted({n for h in hosts for sw in self._cabled.get(h, ()) for n in self._cabled.get(sw, ())}
                      | set(hosts))

    def across(self, host: str, peer: str | None, plane: int | None, vias: list[str]) -> tuple:
        """Every hop of the paths through each of `vias`, in order from host."""
        placed: dict[Hop, int] = {}
        for via in vias:
            for i, hop in enumerate(self.hops(host, peer, plane, via)):
                placed.setdefault(hop, i)
        return tuple(sorted(placed, key=lambda h: (placed[h], h)))


class PlacesCache:
    """The Places of the controller's topology and its hosts' addresses, made again when either changes."""

    def __init__(self) -> None:
        self._places: Places | None = None

    def get(self, topology: Topology | None, host_addresses: dict[str, str]) -> Places:
        places = self._places
        if places is None or places.topology is not topology or places.host_addresses != host_addresses:
            places = self._places = Places(topology, host_addresses)
        return places


def flows_from(samples: Iterable[Sample], places: Places) -> list[Flow]:
    """Samples of job_flow_* and other_flow_* into flows with their readings."""
    readings: dict[tuple[str, str, str | None], dict[int, dict]] = {}
    dscps: dict[tuple[str, str, str | None], set[int]] = {}  # each its connections marked, in the window
    vias: dict[tuple[str, str, str | None], dict[str, None]] = {}  # every switch it was traced through
    for s in samples:
        kind, _, stat = s.name.partition("_flow_")
        jobid = s.labels.get("jobid") if kind == "job" else None
        key = (s.host, s.labels.get("flow", ""), jobid)
        if stat == PATH_STAT:  # an untraced reading says nothing against a traced one
            if (mark := s.labels.get("dscp", "")).isdigit():
                dscps.setdefault(key, set()).add(int(mark))
            if via := s.labels.get("via"):
                vias.setdefault(key, {})[via] = None
        elif stat in READINGS or stat == FALLBACK:
            reading(readings.setdefault(key, {}).setdefault(s.t_ns, {}), stat, s.value)
    out = []
    for (host, label, jobid), by_t in readings.items():
        if (ends := parse_pair(label)) is None:
            continue
        local, remote = ends
        traced, marks = list(vias.get((host, label, jobid), {})), sorted(dscps.get((host, label, jobid), ()))
        # one switch: its path; several (a link went down or came back in the window): it may
        # have crossed each of their paths, and surely only what they share
        via = traced[0] if len(traced) == 1 else None
        peer, plane = places.by_address.get(remote), places.plane(host, local, traced[-1] if traced else None)
        reach = places.across(host, peer, plane, traced) if len(traced) > 1 else places.reach(host, peer, plane, via)
        out.append(Flow(host, label, jobid, peer, plane, places.hops(host, peer, plane, via),
                        marks[0] if len(marks) == 1 else None,
                        tuple(point(t, v) for t, v in sorted(by_t.items())), reach,
                        tuple(marks) if len(marks) > 1 else ()))
    return out


def probe_paths(series: Series, path_map: list[dict], places: Places, hosts: list[str] | None,
                since_ns: int | None = None, delay: str = "owd_p50_ns") -> list[ProbePath]:
    """The probe paths `hosts` (None: every host) measured or were measured by: a flow's floor is
    its pair's; a path's delay (`delay`: the clock's probes, or CLASS_DELAY) only where its newest
    is since `since_ns` (None: the engine's lookback)."""
    if hosts is not None and not hosts:
        return []
    floors = series.delays("owd_floor_ns", hosts=hosts)
    p50s = {(src, dst, path): (v, t) for src, dst, path, v, t in series.path_readings(delay, hosts=hosts,
                                                                                      since_ns=since_ns)}
    links = {(m["src"], m["dst"], m["path"]): m["links"] for m in path_map}
    # each host's readings reach this far back (the sender writes its paths' delays)
    spans = {s.host: int(s.value) for s in series.latest(delay.replace("_p50_ns", "_span_ns"), hosts=hosts)}
    out = []
    for src, dst, path, floor in floors:
        if src and dst:
            v, t = p50s.get((src, dst, path), (None, None))
            out.append(ProbePath(src, dst, tuple(orient(places.links, src, links.get((src, dst, path), []))),
                                 floor / 1e3, None if v is None else v / 1e3, t, spans.get(src, 0)))
    return out


# (host, link, DSCP; None: the whole queue) -> times (ns), waits (us)
Queues = dict[tuple[str, str, int | None], tuple[list[int], list[float]]]


def egress_queues(samples: Iterable[Sample], places: Places) -> Queues:
    """Each host's NIC queues as readings by the link they wait to cross (and the DSCP, for a
    class's own queue), oldest first."""
    out: Queues = {}
    for s in sorted(samples, key=lambda s: s.t_ns):
        dscp = s.labels.get("dscp", "")
        key = (s.host, places.links.key(s.host, s.labels.get("device", "")), int(dscp) if dscp.isdigit() else None)
        times, waits = out.setdefault(key, ([], []))
        times.append(s.t_ns)
        waits.append(s.value / 1e3)
    return out


def waited(queues: Queues, host: str, hops: tuple, t_ns: int | None = None, dscp: int | None = None) -> float:
    """What a packet from `host` over `hops`, marked `dscp`, waited in the host's own egress queue:
    its class's where the host reads one for it, else the whole queue; the reading at `t_ns` or
    just before (None: the newest); 0 where the first hop is not the host's own."""
    if not hops or not hops[0][1].startswith(f"{host}>"):
        return 0.0
    found = queues.get((host, hops[0][0], dscp)) if dscp is not None else None
    if found is None and (found := queues.get((host, hops[0][0], None))) is None:
        return 0.0
    times, waits = found
    at = len(times) if t_ns is None else bisect.bisect_right(times, t_ns)
    return waits[at - 1] if at else 0.0


def nic_rates(rows: Iterable[Exported], places: Places) -> dict[tuple[str, str, str], tuple[list[int], list[float]]]:
    """Each host's NIC rates by the link they cross and the way (tx: out of the host), oldest
    first, at the instants they were read: raw, not on a query's grid, since which span a rate
    counts is what tells load before a fault from load after it."""
    out: dict[tuple[str, str, str], tuple[list[int], list[float]]] = {}
    for r in rows:
        key = (r.host, places.links.key(r.host, r.labels.get("device", "")), r.labels.get("direction", ""))
        times, rates = out.setdefault(key, ([], []))
        for t_ms, value in sorted(zip(r.timestamps_ms, r.values, strict=True)):
            times.append(t_ms * 1_000_000)
            rates.append(value)
    return out


def with_egress(flows: list[Flow], floors: list[ProbePath], queues: Queues,
                class_dscp: int | None = None) -> tuple[list[Flow], list[ProbePath]]:
    """The flows' in-band delays and the probe paths' latest with their sender's egress queue added.
    A host that sorts its packets into classes serves its probes in the priority class, apart
    from every job's traffic: all that waits with them is the probe round they left in, so
    nothing is added to them there. The class stream's (`class_dscp`) wait in its class's queue."""
    by_class = {(host, link) for host, link, dscp in queues if dscp is not None}

    def flow(f: Flow) -> Flow:
        points = tuple(p if p.owd_us is None else
                       replace(p, owd_us=p.owd_us + waited(queues, f.host, f.hops, p.t_ns, f.dscp)) for p in f.points)
        return replace(f, points=points)

    def probe(p: ProbePath) -> ProbePath:
        if p.p50_us is None or (class_dscp is None and p.hops and (p.src, p.hops[0][0]) in by_class):
            return p
        wait = waited(queues, p.src, p.hops, dscp=class_dscp)
        return replace(p, p50_us=p.p50_us + wait) if wait else p
    return [flow(f) for f in flows], [probe(p) for p in floors]


def link_events(events: Iterable[Event], places: Places) -> list[LinkEvent]:
    return [LinkEvent(e.t_ns, places.links.key(e.host, e.device) if e.kind.startswith("link_") else "", e.kind)
            for e in events if e.kind in ("link_down", "link_up") or e.kind.startswith("failover_")]


def flows_near(series: Series, addresses: list[str], since_ns: int, until_ns: int) -> list[Sample]:
    """Every job's flows and the busy flows of no job with an end at one of `addresses`: their
    rates and paths (a flow label is "local->remote"), read in slices of addresses."""
    names = [f"{kind}_flow_{stat}" for kind in ("job", "other") for stat in ("tx_bps", PATH_STAT)]
    return [s for alt in alternations(addresses, SLICE_NAMES_BYTES // 2)
            for s in series.ranges(names, since_ns=since_ns, until_ns=until_ns,
                                   match_re={"flow": f"({alt})->.*|.*->({alt})"})]


def gather(fleet: Fleet, places: PlacesCache, jobid: str, now_ns: int, since_ns: int) -> tuple[list[Flow], Fabric]:
    """Job `jobid`'s flows over the window, the recent rates of the other flows near it, and the
    fabric they cross."""
    storage = fleet.storage
    topology = fleet.monitor.topology if fleet.monitor else None
    here = places.get(topology, {h.info["address"]: h.name for h in storage.hosts() if h.info.get("address")})
    stats = [*READINGS, FALLBACK, PATH_STAT]
    series = fleet.samples
    series.fresh()  # a culprit's flow that just started is a new series: read it beside the delay it causes
    own = series.ranges([f"job_flow_{stat}" for stat in stats], since_ns=since_ns, until_ns=now_ns + 1,
                        match={"jobid": jobid})
    flows = flows_from(own, here)
    # a flow's floor is its pair's, which either end may report; the mesh that locates a queue on
    # its links is every path from a host cabled to a switch the job's hosts are: a link a flow
    # crosses is crossed by many such paths, and a few seconds after a queue began each pair has
    # read only some of its paths again. The same hosts are the ends of every other flow that
    # loads those links (the hosts' own, the leaves' uplinks and downlinks)
    ends = sorted({h for f in flows for h in (f.host, f.peer) if h is not None})
    near = here.near(ends)  # sorted
    recent = max(since_ns, now_ns - recent_width(flows, Thresholds()))
    flows += flows_from([s for s in flows_near(series, here.addresses(near), recent, now_ns + 1)
                         if s.labels.get("jobid") != jobid], here)
    path_map = [m for host in near for m in fleet.monitor.path_map(host)] if fleet.monitor else []
    classes = topology.classes if topology else None
    floors = probe_paths(series, path_map, here, near)
    queues = egress_queues([s for alt in alternations(near)
                            for s in series.range(EGRESS, since_ns=since_ns, until_ns=now_ns + 1,
                                                  match_re={HOST: alt})], here)
    flows, floors = with_egress(flows, floors, queues)
    in_class: list[ProbePath] = []
    if classes:
        in_class = [p for p in probe_paths(series, path_map, here, near, delay=CLASS_DELAY)
                    if p.p50_us is not None]
        in_class = with_egress([], in_class, queues, classes.collective_dscp[0])[1]
    fabric = Fabric(floors,
                    {lk.name: float(lk.rate_bps) for lk in topology.links} if topology else {},
                    link_events(stored_events(storage, since_ns), here),
                    classes.collective_dscp if classes else None, in_class,
                    nic_rates(series.export((NIC_BPS,), since_ns=since_ns, until_ns=now_ns + 1, hosts=ends), here))
    return flows, fabric


def router(fleet: Fleet, auth: list) -> APIRouter:
    """The route, wanting `auth`; included before the jobs routes, whose `{jobid:path}` would take it."""
    api = APIRouter(dependencies=auth)
    places = PlacesCache()

    @api.get("/api/v1/jobs/{jobid:path}/why")
    def job_why(jobid: str, since: str = Query("5m", description="The window: 30s, 5m, 1h")) -> dict:
        """Why job `jobid` is slow: a verdict in one sentence, its evidence, and each flow judged."""
        try:
            window_ns = round(parse_duration(since) * 1e9)
        except (ValueError, ClockfabricError) as e:
            raise HTTPException(422, f"since: {e}") from None
        if window_ns <= 0:
            raise HTTPException(422, "since must be above zero")
        if not jobs.exists(fleet, jobid):
            raise HTTPException(404, f"no job {jobid!r}")
        now = fleet.clock()
        flows, fabric = gather(fleet, places, jobid, now, now - window_ns)
        return why(jobid, flows, fabric, now, window_ns)

    return api
