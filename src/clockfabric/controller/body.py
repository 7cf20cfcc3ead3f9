"""A request body the controller can trust: its size capped before it is read, then JSON with
every value bounded (what the databases and the JSON replies can hold).

Refusals are FastAPI's usual 422 (the place at fault, the reason), without echoing the input back.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError

INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # BIGINT in both databases; SQLite refuses wider integers


@dataclass(frozen=True)
class Bounds:
    max_depth: int = 32  # nesting of lists and objects
    max_string: int = 65_536  # characters, keys included
    max_items: int = 50_000  # entries of one list or object


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, refused with 413 as soon as it is past `limit` bytes: at once by its
    Content-Length, else (a chunked body) while it streams in, never read whole."""
    too_big = HTTPException(413, f"body larger than {limit} bytes")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_big
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


def invalid(errors: Iterable[Mapping[str, Any]]) -> RequestValidationError:
    """422 with FastAPI's usual detail, each error's place under "body"."""
    return RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors])


def parse(body: bytes, bounds: Bounds = Bounds()) -> Any:
    """The body's JSON, or a 422 naming the first value out of `bounds` (see check)."""
    try:
        # NaN and Infinity parse, to be refused by check() with their place
        value = json.loads(body, parse_constant=float)
    except RecursionError:
        raise _refused((), "json_invalid", f"nested deeper than {bounds.max_depth}") from None
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise _refused((), "json_invalid", f"JSON decode error: {e}") from None
    if (fault := check(value, bounds)) is not None:
        raise _refused(*fault)
    return value


def check(value: Any, bounds: Bounds) -> tuple[tuple, str, str] | None:
    """The first fault of a parsed JSON value, as (place, type, reason); None when all is in bounds:
    NaN and Infinity (not JSON; a number past a double's range parses as Infinity), integers outside
    signed 64 bits, lone surrogates (not UTF-8), and `bounds`. A stack, not recursion: depth is
    what is being checked."""
    stack: list[tuple[tuple, Any]] = [((), value)]
    while stack:
        loc, v = stack.pop()
        if isinstance(v, str):
            if (why := _bad_string(v, bounds)) is not None:
                return loc, "string_invalid", why
        elif isinstance(v, float):
            if not math.isfinite(v):
                return loc, "finite_number", f"{v} is not JSON; send a finite number (or null)"
        elif isinstance(v, int) and not isinstance(v, bool):
            if not INT_MIN <= v <= INT_MAX:
                return loc, "int_range", f"integer {v} is outside signed 64 bits"
        elif isinstance(v, (list, dict)):
            if len(loc) >= bounds.max_depth:
                return loc, "too_deep", f"nested deeper than {bounds.max_depth}"
            if len(v) > bounds.max_items:
                return loc, "too_long", f"{len(v)} entries, more than {bounds.max_items}"
            if isinstance(v, dict):
                for key, item in v.items():
                    if (why := _bad_string(key, bounds)) is not None:
                        return loc, "key_invalid", f"a key: {why}"
                    stack.append(((*loc, key), item))
            else:
                stack.extend(((*loc, i), item) for i, item in enumerate(v))
    return None


def _bad_string(s: str, bounds: Bounds) -> str | None:
    if len(s) > bounds.max_string:
        return f"{len(s)} characters, more than {bounds.max_string}"
    if not s.isascii():
        try:
            s.encode()
        except UnicodeEncodeError:
            return "a lone surrogate (\\ud800-\\udfff) is not text"
    return None


def _refused(loc: tuple, kind: str, why: str) -> RequestValidationError:
    return invalid([{"type": kind, "loc": loc, "msg": why}])
