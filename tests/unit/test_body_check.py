"""The bounds check's fast path (strings known good from the body's text) finds what the full walk finds."""

from __future__ import annotations

import json

import pytest
from fastapi.exceptions import RequestValidationError

from clockfabric.controller.body import Bounds, _strings_in_bounds, check, parse

BOUNDS = Bounds(max_depth=4, max_string=64, max_items=5)


@pytest.mark.parametrize("body", [
    b'{"a": [1, 2.5, "x", null, true]}',
    b'{"a": NaN}', b'{"a": [1, -Infinity]}', b'{"a": 1e999}',
    b'{"a": 18446744073709551616}', b'[-9223372036854775809]',
    b'[[[[[1]]]]]', b'{"a": {"b": {"c": {"d": {}}}}}', b'[1, 2, 3, 4, 5, 6]',
])
def test_fast_path_finds_what_the_full_walk_finds(body):
    value = json.loads(body, parse_constant=float)
    assert _strings_in_bounds(body, BOUNDS)
    assert check(value, BOUNDS, strings=False) == check(value, BOUNDS)


@pytest.mark.parametrize(("body", "kind"), [
    (b'{"k": "\\ud800"}', "string_invalid"),  # an escaped surrogate: the body's text says to look
    (b'{"\\udfff": 1}', "key_invalid"),
    ('{"k": "\udc80"}'.encode("utf-8", "surrogatepass"), "string_invalid"),  # raw: not ASCII
    (b'{"k": "' + b"x" * 70 + b'"}', "string_invalid"),  # the body is longer than max_string
])
def test_strings_that_may_be_out_of_bounds_are_still_looked_at(body, kind):
    assert not _strings_in_bounds(body, BOUNDS)
    with pytest.raises(RequestValidationError) as e:
        parse(body, BOUNDS)
    assert e.value.errors()[0]["type"] == kind


def test_a_string_fault_is_placed():
    value = {"a": [1, {"b": "x" * 65}]}
    assert check(value, BOUNDS) == (("a", 1, "b"), "string_invalid", "65 characters, more than 64")
    assert check("x" * 65, BOUNDS)[:2] == ((), "string_invalid")
