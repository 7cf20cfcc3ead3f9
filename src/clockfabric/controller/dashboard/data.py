"""The routes that serve the dashboard's views what the controller's general API does not
answer in one cheap request: a job's time series on one axis; the one-way-delay heatmap (newest
or over a window, as delays or their excess over floor) and one pair's delays over time; the
failover decisions with the flows they moved; the flows that cross a link, each link's load and
the queueing the probe mesh locates on it."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response

from clockfabric.controller import jobs
from clockfabric.controller.dashboard.auth import bearer
from clockfabric.controller.dashboard.failovers import MOVED, decisions
from clockfabric.controller.dashboard.fresh import Drawn, Fresh, Pending
from clockfabric.controller.dashboard.jobseries import STATS, job_series
from clockfabric.controller.dashboard.linkflows import crossing, load
from clockfabric.controller.dashboard.owdmap import MAX_GRID, Delay, Pairs, heatmap, pairs, worst_first
from clockfabric.controller.dashboard.owdpair import pair_series
from clockfabric.controller.dashboard.owdwindow import excess, over_window
from clockfabric.controller.dashboard.queueing import link_queueing
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.render import json_text
from clockfabric.controller.rootcause import Flow
from clockfabric.controller.rootcause_inputs import PATH_STAT, PlacesCache, flows_from
from clockfabric.controller.series.read import BUDGET_S
from clockfabric.controller.series.sample import Sample
from clockfabric.controller.storage.base import Event
from clockfabric.errors import ClockfabricError
from clockfabric.topology import Topology
from clockfabric.units import parse_duration

MAX_WINDOW_NS = 3600 * 10**9  # a chart of one-second points: an hour is 3,600 of them per flow
MAX_WINDOW_SAMPLES = 100_000  # the delays one heatmap over a window may read: 10 pages of about 65 ms
HEATMAP_MAX_AGE_S = 1.0  # every page and block of a heatmap asked within this shares one reading of the delays
HEATMAP_READ_BUDGET_S = 60.0  # a fleet-wide read of delays, which no route waits on past the reader's budget
MAX_EVENTS = 20_000  # of the window, looked through for failover decisions
TX = "job_flow_tx_bps"
FLOW_STATS = [f"{kind}_flow_{stat}" for kind in ("job", "other") for stat in ("tx_bps", PATH_STAT)]


def window_ns(text: str, param: str = "since") -> int:
    """`text` ("30s", "5m", "1h") in nanoseconds; 422 naming `param` where it is not a duration in (0, 1 h]."""
    try:
        found = round(parse_duration(text) * 1e9)
    except (ValueError, ClockfabricError) as e:
        raise HTTPException(422, f"{param}: {e}") from None
    if not 0 < found <= MAX_WINDOW_NS:
        raise HTTPException(422, f"{param} must be above zero and at most 1h")
    return found


def router(fleet: Fleet, check: Callable[[str], None]) -> APIRouter:
    """The routes; `check` refuses a request without the fleet or viewer token."""
    api = APIRouter()
    fresh: Fresh[Pairs] = Fresh(max_age_s=HEATMAP_MAX_AGE_S, wait_s=BUDGET_S)
    drawn = Drawn()  # each page and block of a heatmap drawn once a reading

    @api.get("/api/v1/dashboard/job-series")
    def series(request: Request, jobid: str = Query(min_length=1, max_length=256),
               since: str = Query("5m", description="The window: 30s, 5m, 1h")) -> dict:
        """Job `jobid`'s sent throughput and each sending flow's rate and delay, per second."""
        check(bearer(request.headers.raw))
        window = window_ns(since)
        procs = jobs.of_fleet(fleet).get(jobid)
        if not procs:
            raise HTTPException(404, f"no job {jobid!r}")
        now = fleet.clock()
        samples = fleet.samples.ranges(list(STATS), since_ns=now - window, until_ns=now + 1, match={"jobid": jobid})
        return job_series(jobid, samples, now - window, now)

    @api.get("/api/v1/dashboard/owd")
    def owd(request: Request, stat: str = Query("p50", pattern="^(min|p50|p99|floor)$"),
            window: str = Query("latest", max_length=16, description="latest (each agent's own window) or 30s .. 1h"),
            over_floor: bool = Query(False, description="Each delay less its path's floor: the excess"),
            path: str | None = Query(None, max_length=256, description=(
                "One path label, or a plane (the worst of its paths); default: each pair's worst")),
            src_block: int | None = Query(None, ge=0), dst_block: int | None = Query(None, ge=0),
            offset: int = Query(0, ge=0, le=1_000_000, description="Into the worst pairs, a page of 50")) -> Response:
        """The heatmap: host x host up to 64 hosts, else blocks of hosts (src_block and dst_block: one
        block pair's hosts), each cell the delay of its worst pair, newest or over `window`; and the worst pairs."""
        check(bearer(request.headers.raw))
        if (src_block is None) != (dst_block is None):
            raise HTTPException(422, "give src_block and dst_block together")
        if over_floor and stat == "floor":
            raise HTTPException(422, "over_floor needs stat min, p50 or p99: a floor's excess over itself is 0")
        block = None if src_block is None or dst_block is None else (src_block, dst_block)
        if window != "latest":
            window_ns(window, "window")  # a bad window is refused before anything is read
        key = (stat, window, over_floor, path or None)
        try:
            served = fresh.get(key, lambda: _pairs(*key))
            # host names and path labels are text, which json.dumps escapes; delays are finite floats
            text = drawn.get(key, served.value, (block, offset), lambda: json_text(
                {**heatmap(served.value, stat=stat, block=block, offset=offset), "window": window,
                 "over_floor": over_floor}))
        except Pending as e:  # the reading goes on: 202, as a page that asks again expects
            return JSONResponse({"pending": True, "detail": f"the fleet's delays are {e}"}, status_code=202,
                                headers={"Retry-After": "2"})
        except IndexError as e:
            raise HTTPException(404, str(e)) from None
        # what changes from ask to ask goes at the end of the drawing's object
        return Response(f'{text[:-1]},"age_s":{round(served.age_s, 3)},"read_s":{round(served.took_s, 3)}}}',
                        media_type="application/json")

    @api.get("/api/v1/dashboard/owd-pair")
    def owd_pair(request: Request, src: str = Query(min_length=1, max_length=256),
                 dst: str = Query(min_length=1, max_length=256),
                 stat: str = Query("p50", pattern="^(min|p50|p99|floor)$"),
                 since: str = Query("5m", description="The window: 30s, 5m, 1h")) -> dict:
        """Pair src, dst: each direction's and path's delay per second over the window, as each end pushed it."""
        check(bearer(request.headers.raw))
        now = fleet.clock()
        start = now - window_ns(since)
        samples = [s for host in {src, dst} for s in _window_of(f"owd_{stat}_ns", start, host)]
        return pair_series(samples, src, dst, start, now)

    def _pairs(stat: str, window: str, over_floor: bool, path: str | None) -> Pairs:
        """The heatmap's pairs: the newest delays or over `window`, as they are or less their floors.
        The newest of a fleet past MAX_GRID hosts, worst first: each path's delay is read for the
        pairs a page shows (a quarter of a fleet-wide read's interpreter time at 3,000 hosts)."""
        name = f"owd_{stat}_ns"
        if window != "latest":
            delays = _over_window(name, stat, window_ns(window, "window"))
            return pairs(excess(delays, _newest("owd_floor_ns")) if over_floor else delays, path)
        hosts = fleet.samples.writers(name, HEATMAP_READ_BUDGET_S)
        if len(hosts) > MAX_GRID:
            less = "owd_floor_ns" if over_floor else None
            worst = fleet.samples.pair_worst(name, path=path, less=less, hosts=hosts, budget_s=HEATMAP_READ_BUDGET_S)
            return worst_first(worst, fleet.samples.path_labels(name), path, lambda wanted: _paths_of(
                name, over_floor, path, wanted))
        delays = fleet.samples.delays(name, hosts=hosts, budget_s=HEATMAP_READ_BUDGET_S)
        return pairs(excess(delays, _newest("owd_floor_ns", hosts)) if over_floor else delays, path)

    def _newest(name: str, hosts: list[str] | None = None, peers: list[str] | None = None) -> list[Delay]:
        return fleet.samples.delays(name, hosts=hosts, peers=peers, budget_s=HEATMAP_READ_BUDGET_S)

    def _paths_of(name: str, over_floor: bool, path: str | None,
                  wanted: list[tuple[str, str]]) -> dict[tuple[str, str], dict[str, float]]:
        """The delay per path of the pairs a page shows, read as it is drawn."""
        srcs, dsts = sorted({s for s, _ in wanted}), sorted({d for _, d in wanted})
        delays = _newest(name, srcs, dsts)
        per_path = pairs(excess(delays, _newest("owd_floor_ns", srcs, dsts)) if over_floor else delays, path).delays
        return {pair: per_path[pair] for pair in wanted if pair in per_path}

    def _over_window(name: str, stat: str, window: int) -> list[Delay]:
        """Each series' pushes of `name` in the last `window` ns, reduced by `stat`."""
        return over_window(_window_of(name, fleet.clock() - window), stat)

    def _window_of(name: str, since: int, host: str | None = None) -> list[Sample]:
        """The samples of `name` (pushed by `host`, if given) since `since`; 422 past MAX_WINDOW_SAMPLES."""
        read = fleet.samples.range(name, since_ns=since, until_ns=fleet.clock() + 1, host=host)
        if len(read) > MAX_WINDOW_SAMPLES:
            raise HTTPException(422, f"the window holds over {MAX_WINDOW_SAMPLES} delays: choose a shorter one")
        return read

    @api.get("/api/v1/dashboard/failovers")
    def failovers(request: Request, since: str = Query("1h", description="The window: 30s, 5m, 1h")) -> dict:
        """The failover decisions of the window, newest first, each move with the job flows it moved."""
        check(bearer(request.headers.raw))
        since_ns, after = fleet.clock() - window_ns(since), 0
        events: list[Event] = []
        while len(events) < MAX_EVENTS and (page := fleet.storage.events(since_ns=since_ns, after_id=after,
                                                                          limit=1000)):
            events += page
            after = page[-1].id or after
        moves = any(e.kind == MOVED for e in events)
        return {"items": decisions(events, _job_flows() if moves else []), "complete": len(events) < MAX_EVENTS}

    places = PlacesCache()

    @api.get("/api/v1/dashboard/link-flows")
    def link_flows(request: Request, link: str = Query(min_length=1, max_length=256)) -> dict:
        """The flows pushed in the last jobs.ACTIVE_NS that cross link `link` or may cross it."""
        check(bearer(request.headers.raw))
        topology = fleet.monitor.topology if fleet.monitor else None
        if topology is None or link not in {lk.name for lk in topology.links}:
            raise HTTPException(404, f"no link {link!r} in the controller's topology")
        return {"link": link, "items": crossing(_recent_flows(topology), link)}

    @api.get("/api/v1/dashboard/link-load")
    def link_load(request: Request) -> dict:
        """Each link's load: the newest sending rates of the flows pushed in the last jobs.ACTIVE_NS
        that surely cross it; 404 without a topology."""
        check(bearer(request.headers.raw))
        topology = _topology()
        return {"links": load(_recent_flows(topology), {lk.name: float(lk.rate_bps) for lk in topology.links})}

    @api.get("/api/v1/dashboard/link-queueing")
    def queueing(request: Request) -> dict:
        """Each link's queueing now, located from the whole probe mesh; 404 without a topology."""
        check(bearer(request.headers.raw))
        return link_queueing(fleet, _topology(), places)

    def _topology() -> Topology:
        topology = fleet.monitor.topology if fleet.monitor else None
        if topology is None:
            raise HTTPException(404, "the controller has no topology: start it with --topology FILE or --lab NAME")
        return topology

    def _recent_flows(topology: Topology) -> list[Flow]:
        here = places.get(topology, {h.info["address"]: h.name for h in fleet.storage.hosts() if h.info.get("address")})
        since = fleet.clock() - jobs.ACTIVE_NS
        return flows_from([s for name in FLOW_STATS for s in fleet.samples.latest(name, since_ns=since)], here)

    def _job_flows() -> list[dict]:
        """Every job's flows with their rate, as the jobs route gives them, each with its `jobid`."""
        sent = fleet.samples.latest(TX)
        addresses = {h.info["address"]: h.name for h in fleet.storage.hosts() if h.info.get("address")}
        return [{**flow, "jobid": jobid} for jobid in sorted({s.labels.get("jobid", "") for s in sent} - {""})
                for flow in jobs.flows_of(jobid, {TX: sent}, addresses, fleet.clock())]

    return api
