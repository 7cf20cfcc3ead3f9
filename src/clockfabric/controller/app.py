"""The controller's HTTP API (FastAPI): agents push, people and tools read.

Every route but /healthz wants the fleet token (`Authorization: Bearer <token>`). Lists are
paged by cursor (`after_id`, `limit`; the reply's `next` is the cursor of the next page, or
null) and filtered by time (`since_ns`, `until_ns`).
"""

from __future__ import annotations

import dataclasses
import hmac
import threading
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from clockfabric.controller.fleet import Fleet, UnknownHost
from clockfabric.controller.storage.base import StorageError

MAX_EVENTS, MAX_SAMPLES, MAX_PAGE = 5_000, 50_000, 1_000
Name = Annotated[str, Field(min_length=1, max_length=128)]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE)]


class EventIn(BaseModel):
    seq: int = Field(ge=1)
    t_ns: int = Field(ge=0)
    kind: Name
    device: Annotated[str, Field(max_length=64)] = ""
    detail: dict = {}
    synced: bool = True


class SampleIn(BaseModel):
    name: Name
    value: float
    labels: dict[str, Annotated[str, Field(max_length=256)]] = {}
    t_ns: int | None = Field(default=None, ge=0)


class Push(BaseModel):
    host: Name
    boot: Name
    info: dict = {}
    events: list[EventIn] = Field(default=[], max_length=MAX_EVENTS)
    samples: list[SampleIn] = Field(default=[], max_length=MAX_SAMPLES)
    dropped_events: int = Field(default=0, ge=0)


def page(rows: list, limit: int) -> dict:
    items = [dataclasses.asdict(r) for r in rows]
    return {"items": items, "next": items[-1]["id"] if len(items) == limit else None}


def create_app(fleet: Fleet, token: str, *, tick_s: float = 1.0) -> FastAPI:
    def authorised(request: Request) -> None:
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise HTTPException(401, "missing or wrong fleet token (Authorization: Bearer <token>)")

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        stop = threading.Event()

        def ticker() -> None:
            while not stop.wait(tick_s):
                fleet.tick()

        thread = threading.Thread(target=ticker, name="controller-tick", daemon=True)
        thread.start()
        yield
        stop.set()
        thread.join(5)

    app = FastAPI(title="clockfabric controller", lifespan=lifespan)
    auth = [Depends(authorised)]

    @app.exception_handler(StorageError)
    async def storage_error(_request: Request, e: StorageError):
        if fleet.monitor is not None:
            fleet.monitor.storage_failed(e, fleet.clock())
        return JSONResponse({"detail": f"storage unavailable, retry: {e}"}, status_code=503,
                            headers={"Retry-After": "1"})

    @app.get("/healthz")
    def healthz() -> dict:
        return {"ok": True}

    @app.post("/api/v1/push", dependencies=auth)
    def push(body: Push) -> dict:
        try:
            return fleet.push(body.host, body.boot, body.info, [e.model_dump() for e in body.events],
                              [s.model_dump() for s in body.samples], body.dropped_events)
        except UnknownHost:
            raise HTTPException(403, f"host {body.host!r} is not enrolled: add it to the fleet topology, "
                                     f"or start the controller with --enroll-unknown") from None

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
        return {"items": [h for h in fleet.host_rows() if state is None or h["state"] == state], "next": None}

    @app.get("/api/v1/events", dependencies=auth)
    def events(since_ns: int | None = None, until_ns: int | None = None, host: str | None = None,
               kind: str | None = None, after_id: int = 0, limit: Limit = 100) -> dict:
        return page(fleet.storage.events(since_ns=since_ns, until_ns=until_ns, host=host, kind=kind,
                                         after_id=after_id, limit=limit), limit)

    @app.get("/api/v1/samples", dependencies=auth)
    def samples(name: str | None = None, host: str | None = None, since_ns: int | None = None,
                until_ns: int | None = None, after_id: int = 0, limit: Limit = 1000) -> dict:
        return page(fleet.storage.samples(name=name, host=host, since_ns=since_ns, until_ns=until_ns,
                                          after_id=after_id, limit=limit), limit)

    @app.get("/api/v1/owd", dependencies=auth)
    def owd(stat: str = Query("p50", pattern="^(min|p50|p99|floor)$"), since_ns: int | None = None) -> dict:
        """The newest one-way delay of every (src, dst, path), as each agent last pushed it."""
        rows = fleet.storage.latest_samples(f"owd_{stat}_ns", since_ns=since_ns)
        return {"stat": stat, "items": [{"src": r.labels.get("src", r.host), "dst": r.labels.get("dst"),
                                         "path": r.labels.get("path"), "owd_ns": r.value, "t_ns": r.t_ns,
                                         "reported_by": r.host} for r in rows], "next": None}

    @app.get("/api/v1/links", dependencies=auth)
    def links() -> dict:
        """Each host NIC's state and transition count, as its agent last pushed them."""
        up = {(r.host, r.labels.get("device")): r for r in fleet.storage.latest_samples("link_up")}
        flips = {(r.host, r.labels.get("device")): r.value
                 for r in fleet.storage.latest_samples("link_transitions_total")}
        return {"items": [{"host": h, "device": d, "up": bool(r.value), "t_ns": r.t_ns,
                           "transitions": int(flips.get((h, d), 0))} for (h, d), r in sorted(up.items())],
                "next": None}

    @app.get("/api/v1/alerts", dependencies=auth)
    def alerts(open_only: bool = False, since_ns: int | None = None, until_ns: int | None = None,
               after_id: int = 0, limit: Limit = 100) -> dict:
        return page(fleet.storage.alerts(open_only=open_only, since_ns=since_ns, until_ns=until_ns,
                                         after_id=after_id, limit=limit), limit)

    return app
