"""Failover decisions as the events view lists them, each move with the job flows it moved.
Pure: events and flows in, a list out.

An agent's failover service pushes each decision as an event `failover_<kind>` (detected,
damped, restored, moved, steered, unsteered, unreachable, ...) with the peer as its device and
the planes, the reason and, for a steer, the one flow it steered in its detail. A move re-pins
the host's routes to that peer, so the flows it moved are the job flows the host sends to that
peer that were still pushed at or after the decision (a flow last pushed before it had ended,
and did not move); a steer moved its own flow.
"""

from __future__ import annotations

from collections.abc import Iterable

from clockfabric.controller.storage.base import Event

PREFIX = "failover_"
MOVED = "failover_moved"


def decisions(events: Iterable[Event], flows: list[dict]) -> list[dict]:
    """The failover decisions among `events`, newest first: {id, t_ns, host, peer, decision, planes,
    reason, steered, flows}: `steered` the flow a steer moved (or null), `flows` the job flows a move
    moved ({jobid, flow, tx_bps, t_ns}); `flows` in: job flows as jobs.flows_of gives them, with a `jobid`."""
    out = []
    for e in sorted((e for e in events if e.kind.startswith(PREFIX)), key=lambda e: (e.t_ns, e.id or 0), reverse=True):
        moved = [{k: f[k] for k in ("jobid", "flow", "tx_bps", "t_ns")} for f in flows
                 if e.kind == MOVED and f["host"] == e.host and f["peer"] == e.device and f["t_ns"] >= e.t_ns]
        out.append({"id": e.id, "t_ns": e.t_ns, "host": e.host, "peer": e.device,
                    "decision": e.kind.removeprefix(PREFIX), "planes": e.detail.get("planes", []),
                    "reason": e.detail.get("reason", ""), "steered": e.detail.get("flow"), "flows": moved})
    return out
