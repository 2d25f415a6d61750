"""Hypothesis strategies from the JSON schemas the server publishes (the subset Pydantic emits):
objects, strings (length, pattern, date-time), numbers with bounds, booleans, arrays, enums, anyOf,
local $refs. Values stay mostly valid so the fuzzing reaches the handlers, not just the validator."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

JsonStrategy = st.SearchStrategy[Any]


def from_json_schema(schema: dict[str, Any], root: dict[str, Any] | None = None, depth: int = 0) -> JsonStrategy:
    """A strategy producing values for `schema` (refs resolved against `root`)."""
    root = root or schema
    if depth > 6:
        return st.none()
    if "$ref" in schema:
        node: Any = root
        for part in schema["$ref"].split("/")[1:]:
            node = node[part]
        return from_json_schema(node, root, depth + 1)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([from_json_schema(s, root, depth + 1) for s in schema[key]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_json_schema({**schema, "type": k}, root, depth + 1) for k in kind])
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        lo = schema.get("minimum", schema.get("exclusiveMinimum", -(2**40)))
        hi = schema.get("maximum", schema.get("exclusiveMaximum", 2**40))
        return st.integers(min_value=int(lo), max_value=int(hi))
    if kind == "number":
        lo = schema.get("minimum", schema.get("exclusiveMinimum"))
        hi = schema.get("maximum", schema.get("exclusiveMaximum"))
        return st.floats(min_value=lo, max_value=hi, allow_nan=False, allow_infinity=False)
    if kind == "string":
        if schema.get("format") == "date-time":
            return st.datetimes().map(lambda d: d.isoformat() + "Z")
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True).filter(
                lambda s: len(s) <= schema.get("maxLength", 10_000)
            )
        return st.text(min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", 40), 40))
    if kind == "array":
        items = from_json_schema(schema.get("items", {}), root, depth + 1)
        return st.lists(items, min_size=schema.get("minItems", 0), max_size=min(schema.get("maxItems", 4), 4))
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        fixed = {k: from_json_schema(v, root, depth + 1) for k, v in props.items() if k in required}
        optional = {k: from_json_schema(v, root, depth + 1) for k, v in props.items() if k not in required}
        if not props and schema.get("additionalProperties") not in (False, None):
            return st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=3)
        return st.fixed_dictionaries(fixed, optional=optional)
    return st.one_of(st.none(), st.integers(), st.text(max_size=12), st.booleans())
