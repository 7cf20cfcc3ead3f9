"""JSON on the wire: what comes from the network, its nesting bounded before it is parsed; what
goes to many hosts at once, its shared parts encoded once.

json.loads recurses once per level of nesting: a body nested thousands deep runs it into the
interpreter's recursion limit, and a garbage collection that happens there runs finalizers
that fail in turn, which Python can only print. So every parser of JSON that a peer, an agent
or a controller sent goes through `loads`, which measures the nesting first, in one linear pass
run in C (the strings cut out by a regular expression, the brackets left summed as +1 and -1),
and refuses what is too deep with TooDeep, a ValueError like any other malformed JSON.

`SharedParts` encodes a batch of messages built from the same objects (the clock solver's maps:
each host's carries the same frame and its neighbours' same mappings) with each shared object
encoded once, where json.dumps would encode it again in every message.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

COMPACT = (",", ":")

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


class SharedParts:
    """json.dumps(msg, separators=COMPACT), the same text, for messages that share parts: the
    objects and lists in a message's top `depth` levels of objects are walked, and every value
    below them is encoded once per object (by identity) and then taken from the memo. The memo
    holds each object it encoded, so an identity is not reused while it is there; `clear` it
    when the batch's messages are built anew."""

    def __init__(self, depth: int = 2):
        self.depth = depth
        self._memo: dict[int, tuple[object, str]] = {}

    def dumps(self, msg: Any) -> str:
        return self._encode(msg, 0)

    def clear(self) -> None:
        self._memo.clear()

    def _encode(self, value: Any, level: int) -> str:
        if not isinstance(value, dict | list) or not value:
            return json.dumps(value, separators=COMPACT)
        if level < self.depth and (isinstance(value, list) or all(isinstance(k, str) for k in value)):
            if isinstance(value, list):
                return "[" + ",".join(self._encode(v, level + 1) for v in value) + "]"
            return "{" + ",".join(json.dumps(k) + ":" + self._encode(v, level + 1) for k, v in value.items()) + "}"
        if (held := self._memo.get(id(value))) is None:
            held = self._memo[id(value)] = (value, json.dumps(value, separators=COMPACT))
        return held[1]
