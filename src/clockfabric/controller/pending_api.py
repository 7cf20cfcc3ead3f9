"""Hosts waiting for approval (the controller's `--enroll pending`): list them, approve, reject.

`GET /api/v1/pending` lists every host held, pending or rejected, with what it pushed of itself
(its address, the LLDP neighbour each of its NICs hears); `POST /api/v1/pending/approve` and
`POST /api/v1/pending/reject` take {"hosts": [NAME, ...]}: all of them or none (404 naming the
first not held). Writes want the fleet token: a host's own credential is refused (401), and so is
the dashboard's read-only viewer token (403)."""

from __future__ import annotations

import re

from fastapi import APIRouter, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from clockfabric.controller.body import parse, read_body
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.schemas import HOST

MAX_BODY_BYTES = 256 * 1024
MAX_NAMES = 1_000
_HOST = re.compile(HOST)


def names(body: object) -> list[str]:
    hosts = body.get("hosts") if isinstance(body, dict) else None
    if not isinstance(hosts, list) or not hosts or len(hosts) > MAX_NAMES:
        raise HTTPException(400, f'the body is {{"hosts": [NAME, ...]}}, 1 to {MAX_NAMES} names')
    bad = [h for h in hosts if not isinstance(h, str) or not _HOST.match(h)]
    if bad:
        raise HTTPException(400, f"{str(bad[0])[:80]!r} is not a host name")
    return list(dict.fromkeys(hosts))


def router(fleet: Fleet, auth: list) -> APIRouter:
    api = APIRouter(dependencies=auth)

    @api.get("/api/v1/pending")
    def pending() -> dict:
        return {"items": [{"host": h.name, "state": h.state, "first_seen_ns": h.first_seen_ns,
                           "last_seen_ns": h.last_seen_ns, "address": h.info.get("address"),
                           "role": h.info.get("role", "host"), "neighbours": h.info.get("neighbours", {})}
                          for h in fleet.storage.held()],
                "enroll": fleet.enroll, "next": None}

    async def decide(request: Request, verb: str) -> dict:
        hosts = names(parse(await read_body(request, MAX_BODY_BYTES)))
        held = {h.name for h in await run_in_threadpool(fleet.storage.held)}
        if missing := [h for h in hosts if h not in held]:
            raise HTTPException(404, f"host {missing[0]!r} does not wait for approval: `clockfabric hosts pending` "
                                     "lists those that do")
        act = fleet.approve if verb == "approved" else fleet.reject
        done = [h for h in hosts if await run_in_threadpool(act, h)]
        return {verb: done}

    @api.post("/api/v1/pending/approve")
    async def approve(request: Request) -> dict:
        """Enroll the hosts: their next pushes are stored."""
        return await decide(request, "approved")

    @api.post("/api/v1/pending/reject")
    async def reject(request: Request) -> dict:
        """Refuse the hosts' pushes from now on (an approval later admits them still)."""
        return await decide(request, "rejected")

    return api
