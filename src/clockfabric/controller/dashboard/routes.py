"""The dashboard's routes on the controller's app: the page and its files (no data in them:
they load before the login form asks for a token), the fabric the map draws, the live stream,
and the views' own data (`data`). Every data route wants the fleet token or the viewer token."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, RedirectResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool

from clockfabric.controller.dashboard import data
from clockfabric.controller.dashboard.auth import Tickets, Tokens, ViewerAccess, bearer
from clockfabric.controller.dashboard.changes import Changes, stream
from clockfabric.controller.dashboard.fabric import fabric_json
from clockfabric.controller.fleet import Fleet
from clockfabric.errors import ClockfabricError

STATIC = Path(__file__).parent / "static"
UNAUTHORISED = "missing or wrong token (Authorization: Bearer <fleet or viewer token>)"


def register(app: FastAPI, fleet: Fleet, token: str) -> None:
    """Add the dashboard to the controller's app; `allow_viewer` adds a viewer token later."""
    tokens = Tokens(token)
    app.state.dashboard_tokens = tokens
    app.add_middleware(ViewerAccess, tokens=tokens)
    changes = Changes(fleet)
    tickets = Tickets()

    def check(given: str) -> None:
        if tokens.role(given) is None:
            raise HTTPException(401, UNAUTHORISED)

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/dashboard/")

    @app.get("/dashboard", include_in_schema=False)
    @app.get("/dashboard/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount("/dashboard/static", StaticFiles(directory=STATIC), name="dashboard-static")

    @app.get("/api/v1/fabric")
    def fabric_map(request: Request) -> Response:
        """The topology with each link's state; 404 where the controller was started without one."""
        check(bearer(request.headers.raw))
        topology = fleet.monitor.topology if fleet.monitor else None
        if topology is None:
            raise HTTPException(404, "the controller has no topology: start it with --topology FILE or --lab NAME")
        return Response(fabric_json(topology, fleet.storage, fleet.samples, fleet.clock()),
                        media_type="application/json")

    app.include_router(data.router(fleet, check))

    @app.get("/api/v1/stream/ticket")
    def ticket(request: Request) -> Response:
        """A ticket for one opening of the stream within 30 s (EventSource sends no header)."""
        check(bearer(request.headers.raw))
        return Response(f'{{"ticket":"{tickets.issue()}","ttl_s":{tickets.TTL_S:g}}}', media_type="application/json",
                        headers={"Cache-Control": "no-store"})

    @app.get("/api/v1/stream")
    async def live(request: Request, ticket: str | None = Query(None, max_length=64, description="From "
                   "/api/v1/stream/ticket, for EventSource, which cannot send headers")) -> StreamingResponse:
        """Server-sent events: "change" with the topics that moved (hosts, events, alerts, audits)."""
        if not (ticket and tickets.redeem(ticket)):
            check(bearer(request.headers.raw))
        events = stream(lambda: run_in_threadpool(changes.poll), request.is_disconnected, every_s=changes.every_s)
        return StreamingResponse(events, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def allow_viewer(app: FastAPI, viewer_token: str | None) -> None:
    """Accept `viewer_token` for reads (None: the fleet token only). It must differ from the fleet token."""
    tokens: Tokens = app.state.dashboard_tokens
    if viewer_token is not None and tokens.role(viewer_token) == "fleet":
        raise ClockfabricError("the viewer token must differ from the fleet token: give another --viewer-token-file")
    tokens.viewer = viewer_token
