"""`GET /api/v1/neighbours`: each interface's LLDP neighbour as its node's agent last pushed it,
one row per (host, device, neighbour) seen, newest first within an interface: what
`clockfabric discover` builds a fleet file from."""

from __future__ import annotations

from fastapi import APIRouter

from clockfabric.controller.fleet import Fleet

SAMPLE = "lldp_neighbour"  # agent/push.py's neighbour_samples


def router(fleet: Fleet, auth: list) -> APIRouter:
    api = APIRouter(dependencies=auth)

    @api.get("/api/v1/neighbours")
    def neighbours() -> dict:
        rows = sorted(fleet.samples.latest(SAMPLE), key=lambda r: (r.host, r.labels.get("device", ""), -r.t_ns))
        # "" (none heard) is no label in the engine: given back as the agent wrote it
        return {"items": [{"host": r.host, "t_ns": r.t_ns, "labels": {"neighbour": "", **r.labels}} for r in rows],
                "next": None}

    return api
