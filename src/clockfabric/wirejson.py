"""JSON from the network, its nesting bounded before it is parsed.

json.loads recurses once per level of nesting: a body nested thousands deep runs it into the
interpreter's recursion limit, and a garbage collection that happens there runs finalizers
that fail in turn, which Python can only print. So every parser of JSON that a peer, an agent
or a controller sent goes through `loads`, which measures the nesting first, in one linear pass
run in C (the strings cut out by a regular expression, the brackets left summed as +1 and -1),
and refuses what is too deep with TooDeep, a ValueError like any other malformed JSON.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

MAX_DEPTH = 64  # levels of lists and objects; what agents and the controller send nests a few deep

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class TooDeep(ValueError):
    """JSON nested deeper than its parser takes."""


def depth_within(text: str, max_depth: int = MAX_DEPTH) -> bool:
    """Whether `text` nests no deeper than `max_depth` lists and objects, brackets inside strings
    not counted. Text is measured as json.loads reads it up to its first fault; past a fault (an
    unterminated string, a stray bracket) the count may be off, where json.loads reads nothing."""
    if text.count("[") + text.count("{") <= max_depth:  # the common small case, without a copy
        return True
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) <= max_depth


def loads(data: bytes | str, max_depth: int = MAX_DEPTH, **kwargs: Any) -> Any:
    """json.loads(data, **kwargs), refusing with TooDeep what nests deeper than `max_depth`.
    Bytes are decoded as json.loads decodes them (UTF-8, -16 or -32 by their first bytes), so the
    measure sees the characters the parser will."""
    text = data.decode(json.detect_encoding(data), "surrogatepass") if isinstance(data, bytes) else data
    if not depth_within(text, max_depth):
        raise TooDeep(f"nested deeper than {max_depth}")
    return json.loads(text, **kwargs)
