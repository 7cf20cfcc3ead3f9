"""Malformed-but-JSON bodies for the chaos soak, read from the door's own schemas: for a declared
event detail (each kind's model) or an audit's finding, one field given a value of the wrong JSON
type. The door must refuse each with 422 naming that field, and store nothing."""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel

from clockfabric.controller.schemas import AgentStartDetail, FailoverDetail, FindingIn, LinkDetail

# a declared kind for each detail model, as an agent would send it
DETAILS: dict[str, type[BaseModel]] = {"link_down": LinkDetail, "failover_moved": FailoverDetail,
                                       "agent_start": AgentStartDetail}
# a value of each JSON type, the tempting ones first: a number as a string, a list as a string
VALUES: dict[str, Any] = {"string": "12", "integer": 12, "array": [0, 1], "boolean": True, "object": {"a": 1}}


def field_types(schema: dict) -> list[str]:
    """The JSON types a field's schema allows (anyOf flattened)."""
    if "anyOf" in schema:
        return [t for s in schema["anyOf"] for t in field_types(s)]
    if "enum" in schema:
        return ["string"]
    return [schema["type"]] if "type" in schema else []


def wrong_value(schema: dict) -> Any:
    """A value of a JSON type the field does not allow (a strict model converts nothing)."""
    allowed = set(field_types(schema))
    if "number" in allowed:
        allowed.add("integer")  # an integer is a number
    return next(v for t, v in VALUES.items() if t not in allowed)


def malformed(model: type[BaseModel], rng: random.Random) -> tuple[str, dict]:
    """A field of the model, and a body of valid fields with that one of the wrong type."""
    props = model.model_json_schema()["properties"]
    name = rng.choice(sorted(props))
    return name, {name: wrong_value(props[name])}


def bad_event(rng: random.Random, seq: int, t_ns: int) -> tuple[str, str, dict]:
    """(kind, field, event) with the field of its declared detail of the wrong type."""
    kind = rng.choice(sorted(DETAILS))
    name, detail = malformed(DETAILS[kind], rng)
    if kind.startswith("failover_") and name != "planes":
        detail["planes"] = [0]  # required: only the chosen field is wrong
    return kind, name, {"seq": seq, "t_ns": t_ns, "kind": kind, "device": "eth0", "detail": detail}


def bad_audit(rng: random.Random, started_ns: int) -> tuple[str, dict]:
    """(field, report) with one finding's field of the wrong type."""
    name, _ = malformed(FindingIn, rng)
    finding: dict[str, Any] = {"verdict": "pass", "message": "ok", "host": "h1", "device": "eth0"}
    finding[name] = wrong_value(FindingIn.model_json_schema()["properties"][name])
    return name, {"fleet": "chaos", "verdict": "pass", "exit_code": 0, "started_ns": started_ns,
                  "counts": {"pass": 1}, "checks": [{"id": "chaos.check", "verdict": "pass", "findings": [finding]}]}
