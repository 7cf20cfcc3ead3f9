"""Hypothesis strategies read from a pydantic model's own JSON schema (the subset the controller's
models use: objects, patterned strings and keys, bounded integers, lists, tuples, anyOf, $ref), so a
property test follows the model as it changes rather than a copy of it."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=6)


def from_schema(schema: dict, defs: dict | None = None, max_items: int = 3) -> st.SearchStrategy[Any]:
    defs = schema.get("$defs", {}) if defs is None else defs
    if "$ref" in schema:
        return from_schema(defs[schema["$ref"].rsplit("/", 1)[1]], defs, max_items)
    if "anyOf" in schema:
        return st.one_of([from_schema(s, defs, max_items) for s in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if kind == "string":
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True).filter(
                lambda s: len(s) <= schema.get("maxLength", 10**9))
        return st.text(min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", 16), 16))
    if kind == "integer":
        hi = schema.get("maximum", schema.get("exclusiveMaximum", 2**63) - 1)
        return st.integers(schema.get("minimum", -(2**63)), hi)
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        if "prefixItems" in schema:
            return st.tuples(*(from_schema(s, defs, max_items) for s in schema["prefixItems"])).map(list)
        return st.lists(from_schema(schema.get("items", {}), defs, max_items),
                        max_size=min(schema.get("maxItems", max_items), max_items))
    if kind == "object":
        if "properties" in schema:
            required = set(schema.get("required", ()))
            fields = {k: from_schema(v, defs, max_items) for k, v in schema["properties"].items()}
            return st.fixed_dictionaries({k: s for k, s in fields.items() if k in required},
                                         optional={k: s for k, s in fields.items() if k not in required})
        (key, value), = schema.get("patternProperties", {"^[a-z]{1,8}$": {}}).items()
        return st.dictionaries(st.from_regex(key, fullmatch=True), from_schema(value, defs, max_items) if value else JSON,
                               max_size=min(schema.get("maxProperties", max_items), max_items))
    if kind is None and not schema.get("properties"):
        return JSON  # Any
    raise NotImplementedError(f"schema not covered: {schema}")
