"""The jobs routes of the controller's API: `GET /api/v1/jobs` (paged by job id: `after`, `limit`;
the reply's `next` is the next page's `after`, or null) and `GET /api/v1/jobs/{jobid}`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from clockfabric.controller import jobs
from clockfabric.controller.fleet import Fleet

MAX_PAGE = 1_000


def router(fleet: Fleet, auth: list) -> APIRouter:
    """The routes, each wanting `auth` (the app's token check)."""
    api = APIRouter(dependencies=auth)

    @api.get("/api/v1/jobs")
    def job_list(after: str = "", limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
                 active_only: bool = False) -> dict:
        """Jobs by id: their hosts, ranks, start, and whether they still run."""
        found = [jobs.summary(jobid, procs) for jobid, procs in sorted(jobs.of_fleet(fleet).items()) if jobid > after]
        found = [j for j in found if j["active"] or not active_only][:limit]
        return {"items": found, "next": found[-1]["jobid"] if len(found) == limit else None}

    @api.get("/api/v1/jobs/{jobid:path}")
    def job(jobid: str) -> dict:
        """One job: its hosts, ranks and start; its flow groups with peers, rates, RTT, retransmits,
        cwnd, and the connections (5-tuple, pid) each host's latest push names."""
        procs = jobs.of_fleet(fleet).get(jobid)
        if not procs:
            raise HTTPException(404, f"no job {jobid!r}")
        infos = {h.name: h.info for h in fleet.storage.hosts()}
        addresses = {info["address"]: host for host, info in infos.items() if info.get("address")}
        by_stat = {name: fleet.samples.latest(name, match={"jobid": jobid}) for name in jobs.FLOW_SAMPLES}
        flows = jobs.flows_of(jobid, by_stat, addresses, fleet.clock(), jobs.connections_of(jobid, infos))
        return jobs.detail(jobid, procs, flows)

    return api
