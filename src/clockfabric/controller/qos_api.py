"""The QoS routes of the controller's API, and the policies handed to the agents.

`POST /api/v1/qos` {jobid, class, weight?, override_dscp?} sets a job's policy (400 with one line
naming the mistake); `POST /api/v1/qos/clear` {jobid} forgets it; `GET /api/v1/qos` lists each
policy with what every host that runs the job does about it now (from the agents' pushes), and
each host's enforcement (applied, or the kernel's refusal). Every push is answered with the
policies (`QosBook.handed`): an agent enforces what its last answer said.
"""

from __future__ import annotations

import logging
import threading
import time

from fastapi import APIRouter, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from clockfabric.controller.body import parse, read_body
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.storage.base import StorageError
from clockfabric.errors import ClockfabricError
from clockfabric.qos import policy

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 4096
REFRESH_S = 2.0  # another replica's change reaches this one's pushes within this long


class QosBook:
    """The policies as agents get them, read from storage at most once per REFRESH_S."""

    def __init__(self, fleet: Fleet):
        self.fleet = fleet
        self._lock = threading.Lock()
        self._handed: list[dict] | None = None  # None until a read succeeds
        self._read_s = -float("inf")

    def handed(self) -> list[dict] | None:
        """The policies; the last ones read while the database cannot be read (a push already
        stored is never refused for them); None before any read succeeded: agents keep theirs."""
        with self._lock:
            if time.monotonic() - self._read_s >= REFRESH_S:
                try:
                    self._handed = [policy.Policy(j, c, w, o).as_dict()
                                    for j, c, w, o, _ in self.fleet.storage.qos_policies()]
                    self._read_s = time.monotonic()
                except StorageError as e:
                    log.warning("cannot read the QoS policies (%s): agents keep the last ones", e)
            return self._handed

    def changed(self) -> None:
        with self._lock:
            self._read_s = -float("inf")


def _policy(body: object) -> policy.Policy:
    if not isinstance(body, dict):
        raise HTTPException(400, "the body is a JSON object: {\"jobid\": ..., \"class\": ..., \"weight\": ...}")
    try:
        return policy.make(str(body.get("jobid", "")), str(body.get("class", "")), body.get("weight"),
                           bool(body.get("override_dscp", False)))
    except ClockfabricError as e:
        raise HTTPException(400, str(e)) from None


def view(fleet: Fleet) -> dict:
    """Every policy with each host's enforcement of it, and each host's QoS state; then the jobs
    that asked for a class themselves (`job run --qos`), as the hosts enforce them."""
    hosts = {h.name: h.info["qos"] for h in fleet.storage.hosts() if isinstance(h.info.get("qos"), dict)}
    on: dict[str, dict[str, dict]] = {}  # jobid -> host -> what the host does about it
    for name, q in hosts.items():
        for jobid, j in (q.get("jobs") if isinstance(q.get("jobs"), dict) else {}).items():
            on.setdefault(jobid, {})[name] = j
    items = []
    for jobid, cls, weight, override, set_ns in fleet.storage.qos_policies():
        found = on.pop(jobid, {})
        items.append({**policy.Policy(jobid, cls, weight, override).as_dict(), "set_ns": set_ns,
                      "state": "enforced" if found else "waiting: no host runs the job", "hosts": found})
    for jobid, found in sorted(on.items()):
        first = next(iter(found.values()))
        items.append({"jobid": jobid, "class": first.get("class"), "weight": first.get("weight"),
                      "override_dscp": False, "set_ns": None, "state": "asked by the job", "hosts": found})
    return {"items": items, "hosts": {name: {k: v for k, v in q.items() if k != "jobs"} for name, q in hosts.items()}}


def router(fleet: Fleet, book: QosBook, auth: list) -> APIRouter:
    api = APIRouter(dependencies=auth)

    @api.post("/api/v1/qos")
    async def set_policy(request: Request) -> dict:
        """Set a job's class and weight; a job no host runs yet keeps it until one does."""
        p = _policy(parse(await read_body(request, MAX_BODY_BYTES)))
        await run_in_threadpool(fleet.storage.set_qos, p.jobid, p.qos_class, p.weight, p.override_dscp,
                                fleet.clock())
        book.changed()
        return p.as_dict()

    @api.post("/api/v1/qos/clear")
    async def clear_policy(request: Request) -> dict:
        body = parse(await read_body(request, MAX_BODY_BYTES))
        jobid = str(body.get("jobid", "")) if isinstance(body, dict) else ""
        try:
            policy.check_jobid(jobid)
        except ClockfabricError as e:
            raise HTTPException(400, str(e)) from None
        if not await run_in_threadpool(fleet.storage.clear_qos, jobid):
            raise HTTPException(404, f"job {jobid!r} has no QoS policy: `clockfabric qos show` lists those that do")
        book.changed()
        return {"jobid": jobid, "cleared": True}

    @api.get("/api/v1/qos")
    def show() -> dict:
        return view(fleet)

    return api
