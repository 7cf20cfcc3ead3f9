"""The routes that serve the dashboard's views what the controller's general API does not
answer in one cheap request: a job's time series on one axis."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, HTTPException, Query, Request

from clockfabric.controller import jobs
from clockfabric.controller.dashboard.auth import bearer
from clockfabric.controller.dashboard.jobseries import STATS, job_series
from clockfabric.controller.fleet import Fleet
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

    return api
