"""Stored values as JSON replies can carry them, whatever the database holds: a row stored before
the input was bounded (a NaN, a detail nested past the encoder's recursion, a lone surrogate)
must never break a listing. What cannot be shown is replaced where it is, not the whole reply."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from fastapi.responses import Response

MAX_DEPTH = 64  # deeper than any accepted input (body.Bounds), shallow enough for every encoder
UNSHOWN = "<not shown: nested too deep>"


def renderable(value: Any, depth: int = 0) -> Any:
    """`value` with non-finite floats as null, lone surrogates as U+FFFD and anything nested
    deeper than MAX_DEPTH as a marker string."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, (dict, list, tuple)):
        if depth >= MAX_DEPTH:
            return UNSHOWN
        if isinstance(value, dict):
            return {_text(str(k)): renderable(v, depth + 1) for k, v in value.items()}
        return [renderable(v, depth + 1) for v in value]
    return value


def _text(s: str) -> str:
    if s.isascii():
        return s
    return s.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def record(row: Any) -> dict:
    """A stored record (a dataclass) as a renderable dict: dataclasses.asdict would recurse into
    a deep detail before it could be cut."""
    return {f.name: renderable(getattr(row, f.name)) for f in dataclasses.fields(row)}


def json_text(value: Any) -> str:
    """`value`, renderable already (plain dicts, lists, finite floats), as compact JSON text."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def json_response(value: Any) -> Response:
    """`value`, renderable already, as a JSON reply: for replies of tens of thousands of rows,
    which FastAPI's generic encoder walks several times over."""
    return Response(json_text(value), media_type="application/json")
