"""Host credentials: `POST /api/v1/hosts/revoke` takes {"hosts": [NAME, ...]} and refuses each
host's credential from then on, at the push API and at the series gate, answering the epoch each
host's new one carries ({"revoked": {NAME: EPOCH}}); every other host's credential works on.
`GET /api/v1/hosts/epochs` lists the revoked hosts' epochs. Both want the fleet token."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from clockfabric.controller.body import parse, read_body
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.pending_api import MAX_BODY_BYTES, names


def router(fleet: Fleet, auth: list) -> APIRouter:
    api = APIRouter(dependencies=auth)

    @api.get("/api/v1/hosts/epochs")
    def epochs() -> dict:
        return {"epochs": fleet.storage.epochs()}

    @api.post("/api/v1/hosts/revoke")
    async def revoke(request: Request) -> dict:
        """Refuse the hosts' credentials from now on; the epoch of each one's new credential."""
        hosts = names(parse(await read_body(request, MAX_BODY_BYTES)))
        return {"revoked": {h: await run_in_threadpool(fleet.revoke, h) for h in hosts}}

    return api
