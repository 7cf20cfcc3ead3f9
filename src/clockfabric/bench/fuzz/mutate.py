"""A fast mutation fuzzer in pure Python: inputs made from a seed corpus by byte flips,
truncation, extension, splices of two seeds, interesting integers and doubles written over the
bytes, and, for JSON inputs, structural changes (keys dropped, duplicated or retyped, deep
nesting, huge numbers, lone surrogates). Seeded: a run can be repeated input for input."""

from __future__ import annotations

import copy
import json
import random
import re
import struct
from collections.abc import Callable, Iterator
from typing import Any

INTEGERS = (0, 1, -1, 127, 128, 255, 256, 2**15, 2**16 - 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63,
            2**64 - 1, -(2**31), -(2**63))
DOUBLES = (float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1e308, -1e308, 5e-324)
# what a JSON value may be retyped to: each type, and the edges a parser must refuse or bound
JSON_VALUES: tuple[Any, ...] = (None, True, False, 0, -1, "", "x", [], {}, 2**31, 2**63, -(2**63) - 1, 10**400,
                                1e308, float("nan"), float("inf"), float("-inf"), "\ud800", "\udfff", "h1",
                                "x" * 70_000, [None] * 3, {"t": "map"}, 1.5)
DEEP = "deep-nesting:"  # a marker value, written out as that many nested lists or objects
_DEEP_MARK = re.compile(rb'"deep-nesting:(\d+)([\[{])"')
_PACKS = [struct.Struct(f"{order}{code}") for order in "<>" for code in "bHIQ"]
_SIGNED = [struct.Struct(f"{order}{code}") for order in "<>" for code in "bhiq"]
_DOUBLE = [struct.Struct("<d"), struct.Struct(">d")]


def _pack(rng: random.Random) -> bytes:
    """An interesting integer or double, as 1 to 8 bytes in either order."""
    if rng.random() < 0.25:
        return rng.choice(_DOUBLE).pack(rng.choice(DOUBLES))
    value = rng.choice(INTEGERS)
    for fmt in rng.sample(_PACKS + _SIGNED, len(_PACKS) + len(_SIGNED)):
        try:
            return fmt.pack(value)
        except struct.error:  # does not fit this width: another
            continue
    return b"\x00"


# ---- bytes -------------------------------------------------------------------------------------
def flip(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    if not data:
        return bytes([rng.randrange(256)])
    at = rng.randrange(len(data))
    return data[:at] + bytes([data[at] ^ rng.randrange(1, 256)]) + data[at + 1:]


def flip_bits(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    for _ in range(rng.randrange(2, 9)):
        data = flip(rng, data, seeds)
    return data


def truncate(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    return data[:rng.randrange(len(data))] if data else data


def extend(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    return data + rng.randbytes(rng.choice((1, 2, 4, 8, 16, rng.randrange(1, 512))))


def insert(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.randbytes(rng.randrange(1, 9)) + data[at:]


def delete(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    if not data:
        return data
    at = rng.randrange(len(data))
    return data[:at] + data[at + rng.randrange(1, 17):]


def splice(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    other = rng.choice(seeds)
    return data[:rng.randrange(len(data) + 1)] + other[rng.randrange(len(other) + 1):]


def interesting(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    value = _pack(rng)
    at = rng.randrange(max(1, len(data) - len(value) + 1))
    return data[:at] + value + data[at + len(value):]


def random_bytes(rng: random.Random, data: bytes, seeds: list[bytes]) -> bytes:
    return rng.randbytes(rng.randrange(0, 2 * len(data) + 2))


BYTE_MUTATIONS: list[Callable[[random.Random, bytes, list[bytes]], bytes]] = [
    flip, flip, flip_bits, truncate, extend, insert, delete, splice, interesting, interesting, random_bytes]


# ---- JSON structure ----------------------------------------------------------------------------
def _containers(value: Any, depth: int = 60) -> list:
    """The lists and objects in a JSON value down to `depth` (past it, a mutant nested deep
    already is deep enough)."""
    out, stack = [], [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list) and d < depth:
            out.append(v)
            stack.extend((item, d + 1) for item in (v.values() if isinstance(v, dict) else v))
    return out


def _value(rng: random.Random) -> Any:
    """One of JSON_VALUES, a fresh copy: a mutant changes what it holds."""
    value = rng.choice(JSON_VALUES)
    return copy.deepcopy(value) if isinstance(value, list | dict) else value


def _restructure(rng: random.Random, value: Any) -> Any:
    """One structural change somewhere in `value` (changed in place where it can be)."""
    box = [value]  # the top level, so that it can be replaced too: a message that is not an object
    target = rng.choice(_containers(value) or [box])
    if target is box or rng.random() < 0.02:
        return rng.choice((_value(rng), [value], {"t": value}))
    if not target:
        target.append(_value(rng)) if isinstance(target, list) else target.update(t=_value(rng))
        return box[0]
    key = rng.choice(list(target)) if isinstance(target, dict) else rng.randrange(len(target))
    action = rng.randrange(6)
    if action == 0:  # drop
        del target[key]
    elif action == 1:  # retype
        target[key] = _value(rng)
    elif action == 2:  # nest deep
        target[key] = f"{DEEP}{rng.choice((33, 200, 1000, 5000))}{rng.choice('[{')}"  # nested when written
    elif action == 3:  # a huge or edge number
        target[key] = rng.choice((10**rng.randrange(18, 400), -(10**rng.randrange(18, 400)), 2**63, 1e308 * 10,
                                  rng.choice(INTEGERS), rng.choice(DOUBLES)))
    elif action == 4 and isinstance(target, dict):  # a key retyped: a new key, a surrogate, a long one
        target[rng.choice(("\ud800", "", "t", "x" * 300, "host", "hosts"))] = target.pop(key)
    else:  # duplicate an item (a list grows; an object's value copied under another of its keys)
        if isinstance(target, list):
            target.insert(key, target[key])
        else:
            target[rng.choice(list(target))] = target[key]
    return box[0]


def _deep(match: re.Match) -> bytes:
    depth, bracket = int(match[1]), match[2]
    opening, closing = (b"[", b"]") if bracket == b"[" else (b'{"x":', b"}")
    return opening * depth + b"0" + closing * depth


def _dumps(rng: random.Random, value: Any) -> bytes:
    if rng.random() < 0.5:
        data = json.dumps(value).encode()
    else:  # raw text: a lone surrogate as UTF-8 bytes (surrogatepass), which is not UTF-8
        data = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return _DEEP_MARK.sub(_deep, data) if DEEP.encode() in data else data


def duplicate_key(rng: random.Random, data: bytes) -> bytes:
    """An object key written twice in the text (json.loads keeps the last)."""
    at = data.find(b'"', rng.randrange(len(data))) if data else -1
    end = data.find(b'":', at + 1) if at >= 0 else -1
    if end < 0:
        return data
    return data[:at] + data[at:end + 2] + b"0," + data[at:]


def structural(rng: random.Random, seed: bytes) -> bytes:
    try:
        value = json.loads(seed)
    except ValueError:
        return seed
    for _ in range(rng.randrange(1, 4)):
        value = _restructure(rng, value)
    data = _dumps(rng, value)
    return duplicate_key(rng, data) if rng.random() < 0.1 else data


def inputs(seeds: list[bytes], structured: bool, max_size: int, seed: int = 0) -> Iterator[bytes]:
    """Endless inputs from `seeds`: the seeds themselves first, then mutants of 1-4 mutations
    (structural ones first for JSON), each cut to `max_size`."""
    rng = random.Random(seed)
    yield from (s[:max_size] for s in seeds)
    mutations = BYTE_MUTATIONS
    while True:
        data = rng.choice(seeds)
        if structured and rng.random() < 0.6:
            data = structural(rng, data)
            rounds = 0 if rng.random() < 0.7 else 1
        else:
            rounds = rng.randrange(1, 5)
        for _ in range(rounds):
            data = rng.choice(mutations)(rng, data, seeds)
        yield data[:max_size]
