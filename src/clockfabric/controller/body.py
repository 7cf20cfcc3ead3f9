"""A request body the controller can trust: its size capped before it is read, then JSON with
every value bounded (what the databases and the JSON replies can hold).

Refusals are FastAPI's usual 422 (the place at fault, the reason), without echoing the input back.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError

from clockfabric import wirejson

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
        # NaN and Infinity parse, to be refused by check() with their place; up to MAX_DEPTH
        # levels parse too, so that check() names the place where nesting passed max_depth
        value = wirejson.loads(body, max(bounds.max_depth, wirejson.MAX_DEPTH), parse_constant=float)
    except wirejson.TooDeep:
        raise _refused((), "json_invalid", f"nested deeper than {bounds.max_depth}") from None
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise _refused((), "json_invalid", f"JSON decode error: {e}") from None
    if (fault := check(value, bounds, strings=not _strings_in_bounds(body, bounds))) is not None:
        raise _refused(*fault)
    return value


# a \u escape of a surrogate (\ud800-\udfff), the one way an ASCII body can hold one
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _strings_in_bounds(body: bytes, bounds: Bounds) -> bool:
    """Whether the body's text alone shows that every string and key is in bounds: an ASCII body
    no longer than max_string holds no longer string, and no lone surrogate but by an escape.
    What an agent sends (ensure_ascii JSON of a few kB) passes, sparing a look at each string."""
    return len(body) <= bounds.max_string and body.isascii() and _SURROGATE_ESCAPE.search(body) is None


def check(value: Any, bounds: Bounds, strings: bool = True) -> tuple[tuple, str, str] | None:
    """The first fault of a value json.loads made, as (place, type, reason); None when all is in
    bounds: NaN and Infinity (not JSON; a number past a double's range parses as Infinity), integers
    outside signed 64 bits, lone surrogates (not UTF-8), and `bounds`. `strings=False` skips strings
    and keys (known good from the body's text). A stack of containers, not recursion: depth is what
    is being checked; a container's scalars are checked where they stand (by exact type: json.loads
    makes no subclasses), their place built only for a fault."""
    stack: list[tuple[tuple, Any]] = [((), [value])]  # the value as the one item of a placeless list
    while stack:
        loc, v = stack.pop()
        if loc:
            if len(loc) - 1 >= bounds.max_depth:
                return loc[1:], "too_deep", f"nested deeper than {bounds.max_depth}"
            if len(v) > bounds.max_items:
                return loc[1:], "too_long", f"{len(v)} entries, more than {bounds.max_items}"
        for key, item in (v.items() if type(v) is dict else enumerate(v)):
            if strings and type(key) is str and (why := _bad_string(key, bounds)) is not None:
                return loc[1:], "key_invalid", f"a key: {why}"
            kind = type(item)
            if kind is str:
                if strings and (why := _bad_string(item, bounds)) is not None:
                    return (*loc, key)[1:], "string_invalid", why
            elif kind is float:
                if not math.isfinite(item):
                    return (*loc, key)[1:], "finite_number", f"{item} is not JSON; send a finite number (or null)"
            elif kind is dict or kind is list:
                stack.append(((*loc, key), item))
            elif kind is int and not INT_MIN <= item <= INT_MAX:
                return (*loc, key)[1:], "int_range", f"integer {item} is outside signed 64 bits"
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
