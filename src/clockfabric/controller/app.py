"""The controller's HTTP API (FastAPI): agents push, `clockfabric audit` posts its reports, people
and tools read.

Every route but /healthz and /readyz wants the fleet token (`Authorization: Bearer <token>`), but
a push, which wants the pushing host's own credential (controller.token.host_token). A push from a
host not enrolled is refused (403), or, with `--enroll pending`, held for an operator's approval
(202, Retry-After: pending_api lists, approves and rejects such hosts). Lists are
paged by cursor (`after_id`, `limit`; the reply's `next` is the cursor of the next page, or
null) and filtered by time (`since_ns`, `until_ns`).
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
import math
from contextlib import asynccontextmanager
from typing import Annotated, TypeVar

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from clockfabric.auth.credential import token_identity
from clockfabric.controller import credentials_api, jobs_api, neighbours_api, pending_api, qos_api, rootcause_inputs
from clockfabric.controller.body import Bounds, invalid, parse, read_body
from clockfabric.controller.dashboard.auth import bearer
from clockfabric.controller.dashboard.routes import register as register_dashboard
from clockfabric.controller.fleet import Fleet, UnknownHost
from clockfabric.controller.headers import SecurityHeaders
from clockfabric.controller.operations import Operations
from clockfabric.controller.render import json_response, record, renderable
from clockfabric.controller.schemas import AuditIn, Push, detail_errors
from clockfabric.controller.series.read import SeriesError
from clockfabric.controller.storage.base import Audit, StorageError

MAX_PAGE = 1_000
PENDING_RETRY_S = 2  # how soon a host held for approval pushes again (Retry-After): its approval shows this soon
SAMPLES_WINDOW_NS = 3600 * 10**9  # /api/v1/samples with no since_ns: the last hour
MAX_AUDIT_BYTES = 4 * 2**20  # a report, every finding with its evidence: room for thousands of findings
# the largest push an agent sends (2,000 events, a summary of every path and device), many times over
MAX_PUSH_BYTES = 16 * 2**20
AUDIT_BOUNDS = Bounds(max_string=MAX_AUDIT_BYTES)  # evidence may be a long command output; the size cap holds it
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE)]
M = TypeVar("M", bound=BaseModel)
log = logging.getLogger(__name__)


def validated(model: type[M], value: object) -> M:
    try:
        return model.model_validate(value)
    except ValidationError as e:
        raise invalid(e.errors(include_url=False, include_context=False, include_input=False)) from None


def _count(value: float) -> int | None:
    return int(value) if math.isfinite(value) else None


def page(rows: list, limit: int) -> dict:
    items = [record(r) for r in rows]
    return {"items": items, "next": items[-1]["id"] if len(items) == limit else None}


def summary(a: Audit) -> dict:
    """An audit without its report, as the list shows it."""
    out = record(dataclasses.replace(a, report=None))
    del out["report"]
    return out


def create_app(fleet: Fleet, token: str, *, tick_s: float = 1.0, check_s: float = 1.0) -> FastAPI:
    """`tick_s`: how often stale hosts and alerts are looked at; `check_s`: storage checked."""
    def authorised(request: Request) -> None:
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise HTTPException(401, "missing or wrong fleet token (Authorization: Bearer <token>)")

    ops = Operations(fleet, tick_s=tick_s, check_s=check_s)  # supervised loops, /readyz, /metrics

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        ops.start()
        yield
        ops.stop()

    # no Swagger or ReDoc pages (they load their scripts from a CDN) and no schema without the token
    app = FastAPI(title="clockfabric controller", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.operations = ops
    auth = [Depends(authorised)]
    ops.register(app, auth)
    qos = qos_api.QosBook(fleet)  # every push is answered with the policies

    @app.exception_handler(StorageError)
    async def storage_error(_request: Request, e: StorageError):
        if fleet.monitor is not None:
            fleet.monitor.storage_failed(e, fleet.clock())
        return JSONResponse({"detail": f"storage unavailable, retry: {e}"}, status_code=503,
                            headers={"Retry-After": "1"})

    @app.exception_handler(SeriesError)
    async def series_error(_request: Request, e: SeriesError):
        return JSONResponse({"detail": str(e)}, status_code=503, headers={"Retry-After": "1"})

    @app.exception_handler(ClientDisconnect)
    async def client_left(request: Request, _e: ClientDisconnect) -> Response:
        """A client gone before its body was whole (an agent killed, a network cut): ordinary
        enough for one line and a count, not a traceback. The answer reaches no one."""
        request.state.refusal = "client_disconnect"
        log.warning("client %s left before its request body was whole: %s %s",
                    request.client.host if request.client else "?", request.method, request.url.path,
                    extra={"reason": "client_disconnect"})
        return Response(status_code=400)

    @app.get("/healthz")
    def healthz() -> dict:
        return {"ok": True}

    @app.get("/api/v1/openapi.json", dependencies=auth, include_in_schema=False)
    def openapi() -> dict:
        """The API's OpenAPI schema, for a client generator or a docs viewer the operator hosts."""
        return app.openapi()

    def pusher(request: Request) -> str:
        """The host whose credential the push carries (before its body is read); 401 for any other."""
        given = bearer(request.headers.raw)
        found = token_identity(token, given)
        if found is None:
            why = ("the fleet token does not push as a host" if hmac.compare_digest(given.encode(), token.encode())
                   else "missing or wrong host credential")
            raise HTTPException(401, f"{why}: give each agent its own (`clockfabric token host NAME`), "
                                     "as Authorization: Bearer <host credential>")
        host, epoch = found
        if epoch != (current := fleet.epoch(host)):
            request.state.refusal = "revoked"
            raise HTTPException(401, f"host {host!r}'s credential of epoch {epoch} was revoked: give the agent a new "
                                     f"one (`clockfabric token host {host} --epoch {current}`)")
        return host

    @app.post("/api/v1/push", response_model=None)
    async def push(request: Request, claimed: str = Depends(pusher)) -> dict | Response:  # noqa: B008 - FastAPI's way
        """Store a push, all of it or nothing. Read here, not by FastAPI, to cap and bound it."""
        body = validated(Push, parse(await read_body(request, MAX_PUSH_BYTES)))
        if errors := detail_errors(body):
            raise invalid(errors)
        if body.host != claimed:
            request.state.refusal = "wrong_host"
            raise HTTPException(403, f"this credential is host {claimed!r}'s: it does not push as {body.host!r}")
        try:
            items = body.model_dump(include={"events", "ended"})  # one call, not one per item

            def store() -> dict:  # one hop to a worker thread a push, not two
                stored = fleet.push(body.host, body.boot, body.info, items["events"], body.dropped_events,
                                    body.paths, ended=items["ended"], boots=body.boots)
                handed = qos.handed()
                return stored if handed is None else {**stored, "qos": handed}

            return await run_in_threadpool(store)
        except UnknownHost:
            if fleet.enroll != "pending":
                raise HTTPException(403, f"host {body.host!r} is not enrolled: add it to the fleet topology, "
                                         f"or start the controller with --enroll-unknown") from None
        return await held(request, body)

    async def held(request: Request, body: Push) -> Response:
        """A host not enrolled, under --enroll pending: kept (its address and what its NICs hear)
        until an operator approves or rejects it; its events stay with its agent meanwhile."""
        neighbours = {s.labels.get("device", ""): s.labels.get("neighbour", "")
                      for s in body.samples if s.name == neighbours_api.SAMPLE}
        state = await run_in_threadpool(fleet.hold, body.host, body.info, neighbours)
        request.state.refusal = state if state != "full" else "pending_full"
        if state == "rejected":
            raise HTTPException(403, f"host {body.host!r} was rejected by an operator: `clockfabric hosts approve "
                                     f"{body.host}` admits it")
        if state == "full":
            return JSONResponse({"detail": "too many hosts wait for approval: approve or reject some "
                                           "(`clockfabric hosts pending`)"}, status_code=503,
                                headers={"Retry-After": "60"})
        return JSONResponse({"pending": True, "host": body.host,
                             "detail": f"host {body.host!r} waits for an operator's approval: "
                                       f"`clockfabric hosts approve {body.host}`"},
                            status_code=202, headers={"Retry-After": str(PENDING_RETRY_S)})

    @app.get("/api/v1/whoami")
    def whoami(claimed: str = Depends(pusher)) -> dict:  # noqa: B008 - FastAPI's way
        """Which host a push credential is for, whether this controller takes its pushes, and the
        fleet it serves (the topology's name; None without one): what `clockfabric doctor` checks
        before an agent starts, with nothing pushed."""
        monitor = fleet.monitor
        topology = getattr(monitor, "topology", None)
        enrolled = fleet.enroll_unknown or fleet.storage.host(claimed) is not None
        found = None if enrolled else fleet.storage.held_host(claimed)
        held = found.state if found is not None else None
        pending = "pending" if fleet.enroll == "pending" and held is None and not enrolled else held
        return {"host": claimed, "enrolled": enrolled, "pending": pending,
                "fleet": topology.name if topology is not None else None}

    @app.get("/api/v1/fleet", dependencies=auth)
    def fleet_summary() -> dict:
        hosts = fleet.host_rows()
        open_alerts = fleet.storage.alerts(open_only=True, limit=MAX_PAGE)
        return {"hosts": len(hosts), "ok": sum(h["state"] == "ok" for h in hosts),
                "stale": sorted(h["host"] for h in hosts if h["state"] == "stale"),
                "never_seen": sorted(h["host"] for h in hosts if h["state"] == "never seen"),
                "open_alerts": len(open_alerts)}

    @app.get("/api/v1/hosts", dependencies=auth)
    def hosts(state: str | None = None) -> dict:
        return {"items": [renderable(h) for h in fleet.host_rows() if state is None or h["state"] == state],
                "next": None}

    @app.get("/api/v1/events", dependencies=auth)
    def events(since_ns: int | None = None, until_ns: int | None = None, host: str | None = None,
               kind: str | None = None, after_id: int = 0, limit: Limit = 100) -> dict:
        return page(fleet.storage.events(since_ns=since_ns, until_ns=until_ns, host=host, kind=kind,
                                         after_id=after_id, limit=limit), limit)

    @app.get("/api/v1/samples", dependencies=auth)
    def samples(name: str = Query(..., pattern=r"^[A-Za-z_][A-Za-z0-9_]*$"), host: str | None = None,
                since_ns: int | None = None, until_ns: int | None = None,
                step_s: float = Query(1.0, gt=0)) -> dict:
        """`name`'s values over the window (an hour to now by default), one per step per series."""
        until = fleet.clock() if until_ns is None else until_ns
        since = until - SAMPLES_WINDOW_NS if since_ns is None else since_ns
        rows = fleet.samples.range(name, since_ns=since, until_ns=until, host=host, step_s=step_s)
        return {"items": [renderable(r) for r in rows], "next": None}

    @app.get("/api/v1/owd", dependencies=auth)
    def owd(stat: str = Query("p50", pattern="^(min|p50|p99|floor)$"), since_ns: int | None = None) -> Response:
        """The newest one-way delay of every (src, dst, path), as each agent last pushed it."""
        rows = fleet.samples.latest(f"owd_{stat}_ns", since_ns=since_ns)
        # every field but the delay is text, which json.dumps escapes as it must: only a NaN needs mending
        return json_response({"stat": stat, "items": [{
            "src": r.labels.get("src", r.host), "dst": r.labels.get("dst"), "path": r.labels.get("path"),
            "owd_ns": r.value if math.isfinite(r.value) else None, "t_ns": r.t_ns, "reported_by": r.host}
            for r in rows], "next": None})

    @app.get("/api/v1/links", dependencies=auth)
    def links() -> dict:
        """Each host NIC's state and transition count, as its agent last pushed them."""
        up = {(r.host, r.labels.get("device", "")): r for r in fleet.samples.latest("link_up")}
        flips = {(r.host, r.labels.get("device", "")): r.value for r in fleet.samples.latest("link_transitions_total")}
        return {"items": [{"host": h, "device": d, "up": bool(r.value), "t_ns": r.t_ns,
                           "transitions": _count(flips.get((h, d), 0.0))} for (h, d), r in sorted(up.items())],
                "next": None}

    @app.get("/api/v1/paths", dependencies=auth)
    def paths(host: str | None = None) -> dict:
        """Which switch each probe path crosses and the links it takes, as each agent last learned
        them (t_ns: when that host's map last changed). Empty without a topology."""
        return {"items": fleet.monitor.path_map(host) if fleet.monitor else [], "next": None}

    @app.get("/api/v1/alerts", dependencies=auth)
    def alerts(open_only: bool = False, since_ns: int | None = None, until_ns: int | None = None,
               after_id: int = 0, limit: Limit = 100) -> dict:
        """Storage's alerts; while storage fails, its alert (held in memory, id null) first on the
        first page, and alone if storage cannot be read."""
        held = fleet.monitor.alerts.storage_alert if fleet.monitor is not None else None
        try:
            found = page(fleet.storage.alerts(open_only=open_only, since_ns=since_ns, until_ns=until_ns,
                                              after_id=after_id, limit=limit), limit)
        except StorageError:
            if held is None:
                raise
            found = {"items": [], "next": None}
        if held is not None and after_id == 0 and (until_ns is None or held.opened_ns < until_ns):
            found["items"].insert(0, record(held))
        return found

    @app.post("/api/v1/audits", dependencies=auth, status_code=201)
    async def add_audit(request: Request) -> dict:
        """Keep an audit's report (`clockfabric audit` posts it). Read here, not by FastAPI, to cap its size."""
        report = parse(await read_body(request, MAX_AUDIT_BYTES), AUDIT_BOUNDS)
        checked = validated(AuditIn, report)
        stored = await run_in_threadpool(fleet.storage.add_audit, Audit(
            t_ns=checked.started_ns, fleet=checked.fleet, verdict=checked.verdict, exit_code=checked.exit_code,
            counts={str(k): n for k, n in checked.counts.items()}, report=report))
        return summary(stored)

    @app.get("/api/v1/audits", dependencies=auth)
    def audits(since_ns: int | None = None, until_ns: int | None = None, after_id: int = 0,
               limit: Limit = 100) -> dict:
        """Summaries (verdict, exit code, counts per verdict), oldest first; /api/v1/audits/{id} has the report."""
        found = fleet.storage.audits(since_ns=since_ns, until_ns=until_ns, after_id=after_id, limit=limit)
        return {"items": [summary(a) for a in found], "next": found[-1].id if len(found) == limit else None}

    @app.get("/api/v1/audits/{audit_id}", dependencies=auth)
    def audit(audit_id: int) -> dict:
        found = fleet.storage.audit(audit_id)
        if found is None:
            raise HTTPException(404, f"no audit {audit_id}")
        return record(found)

    app.include_router(rootcause_inputs.router(fleet, auth))  # before jobs_api: its {jobid:path} takes all
    app.include_router(jobs_api.router(fleet, auth))
    app.include_router(neighbours_api.router(fleet, auth))
    app.include_router(pending_api.router(fleet, auth))
    app.include_router(credentials_api.router(fleet, auth))
    app.include_router(qos_api.router(fleet, qos, auth))
    register_dashboard(app, fleet, token)
    app.add_middleware(SecurityHeaders)  # added last: outermost, so every answer carries them
    return app
