"""The routes that serve the dashboard's views what the controller's general API does not
answer in one cheap request: a job's time series on one axis, the one-way-delay heatmap."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import Response

from clockfabric.controller import jobs
from clockfabric.controller.dashboard.auth import bearer
from clockfabric.controller.dashboard.jobseries import STATS, job_series
from clockfabric.controller.dashboard.owdmap import heatmap
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.render import json_response
from clockfabric.controller.rootcause_inputs import stored
from clockfabric.errors import ClockfabricError
from clockfabric.units import parse_duration

MAX_WINDOW_NS = 3600 * 10**9  # a chart of one-second points: an hour is 3,600 of them per flow


def window_ns(since: str) -> int:
    """`since` ("30s", "5m", "1h") in nanoseconds; 422 where it is not a duration in (0, 1 h]."""
    try:
        found = round(parse_duration(since) * 1e9)
    except (ValueError, ClockfabricError) as e:
        raise HTTPException(422, f"since: {e}") from None
    if not 0 < found <= MAX_WINDOW_NS:
        raise HTTPException(422, "since must be above zero and at most 1h")
    return found


def router(fleet: Fleet, check: Callable[[str], None]) -> APIRouter:
    """The routes; `check` refuses a request without the fleet or viewer token."""
    api = APIRouter()

    @api.get("/api/v1/dashboard/job-series")
    def series(request: Request, jobid: str = Query(min_length=1, max_length=256),
               since: str = Query("5m", description="The window: 30s, 5m, 1h")) -> dict:
        """Job `jobid`'s sent throughput and each sending flow's rate and delay, per second."""
        check(bearer(request.headers.raw))
        window = window_ns(since)
        procs = jobs.processes_by_job(fleet.storage.latest_samples(jobs.PROCESS), fleet.clock()).get(jobid)
        if not procs:
            raise HTTPException(404, f"no job {jobid!r}")
        now = fleet.clock()
        samples = stored(fleet.storage.job_samples, jobid=jobid, names=list(STATS), since_ns=now - window)
        return job_series(jobid, samples, now - window, now)

    @api.get("/api/v1/dashboard/owd")
    def owd(request: Request, stat: str = Query("p50", pattern="^(min|p50|p99|floor)$"),
            path: str | None = Query(None, max_length=256, description="One path label; default: each pair's worst"),
            src_block: int | None = Query(None, ge=0), dst_block: int | None = Query(None, ge=0),
            offset: int = Query(0, ge=0, le=1_000_000, description="Into the worst pairs, a page of 50")) -> Response:
        """The heatmap: host x host up to 64 hosts, else blocks of hosts (src_block and dst_block: one
        block pair's hosts), each cell the newest delay of its worst pair; and the worst pairs."""
        check(bearer(request.headers.raw))
        if (src_block is None) != (dst_block is None):
            raise HTTPException(422, "give src_block and dst_block together")
        block = None if src_block is None or dst_block is None else (src_block, dst_block)
        try:
            found = heatmap(fleet.storage.latest_rows(f"owd_{stat}_ns"), stat=stat, path=path or None,
                            block=block, offset=offset)
        except IndexError as e:
            raise HTTPException(404, str(e)) from None
        # host names and path labels are text, which json.dumps escapes; delays are finite floats
        return json_response(found)

    return api
