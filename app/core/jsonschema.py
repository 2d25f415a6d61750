"""Lean JSON schemas: what a model needs to call a tool, without what only a code generator needs.

Pydantic's schemas are written for code generators: every model gets a `title`, nested models live
in `$defs` behind `$ref`, an optional field is `anyOf: [X, {"type": "null"}]` with `default: null`,
and a closed model says `additionalProperties: false`. A client puts the tool's inputSchema in front
of the model on every turn, so `lean` keeps the meaning and drops the rest:

- every `$ref` is inlined (a recursive definition stays in `$defs`);
- `title` keywords go (a *property* called `title` stays);
- `anyOf: [X, null]` becomes X: leaving the field out is how a caller says "none";
- `default: null` and `additionalProperties: false` go (the server still validates strictly);
- `allOf` of a single schema is merged into its parent.

The server validates arguments with the full model, so a lean schema never widens what is accepted.
"""

from __future__ import annotations

from typing import Any

_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else")


def lean(schema: dict[str, Any]) -> dict[str, Any]:
    """The lean form of a JSON schema (see the module docstring for the rules)."""
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    recursive: set[str] = set()
    out = _walk(schema, defs, (), recursive)
    out.pop("$defs", None)
    out.pop("definitions", None)
    if recursive:
        out["$defs"] = {name: _walk(defs[name], defs, (name,), recursive) for name in sorted(recursive)}
    return out


def _ref_name(ref: str) -> str | None:
    for prefix in ("#/$defs/", "#/definitions/"):
        if ref.startswith(prefix):
            return ref[len(prefix) :]
    return None


def _walk(node: dict[str, Any], defs: dict[str, Any], stack: tuple[str, ...], recursive: set[str]) -> dict[str, Any]:
    if "$ref" in node:
        name = _ref_name(node["$ref"])
        if name is not None and name in defs:
            if name in stack:
                recursive.add(name)
                return {k: v for k, v in node.items() if k != "title"}
            target = _walk(defs[name], defs, (*stack, name), recursive)
            siblings = _walk({k: v for k, v in node.items() if k != "$ref"}, defs, stack, recursive)
            return {**target, **siblings}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            if key in ("$defs", "definitions"):
                continue
            out[key] = {k: _walk(v, defs, stack, recursive) if isinstance(v, dict) else v for k, v in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_walk(v, defs, stack, recursive) if isinstance(v, dict) else v for v in value]
        elif key in _SCHEMA_VALUES and isinstance(value, dict):
            out[key] = _walk(value, defs, stack, recursive)
        else:
            out[key] = value
    if out.get("additionalProperties") is False:
        del out["additionalProperties"]
    if "default" in out and out["default"] is None:
        del out["default"]
    branches = out.get("anyOf")
    if isinstance(branches, list):
        kept = [b for b in branches if b != {"type": "null"}]
        if len(kept) < len(branches):
            if len(kept) == 1:
                del out["anyOf"]
                out = {**kept[0], **out}
            else:
                out["anyOf"] = kept
    parts = out.get("allOf")
    if isinstance(parts, list) and len(parts) == 1 and isinstance(parts[0], dict):
        del out["allOf"]
        out = {**parts[0], **out}
    return out


def size(schema: dict[str, Any]) -> int:
    """Characters of the schema as compact JSON (what it costs on the wire and in a prompt)."""
    import json

    return len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False))


_FORMATS = {
    "date-time": "2026-01-01T00:00:00Z",
    "date": "2026-01-01",
    "uri": "https://example.org/data",
    "email": "someone@example.org",
    "uuid": "00000000-0000-4000-8000-000000000000",
}


def example_of(schema: dict[str, Any]) -> Any:
    """A small value valid for a lean schema: declared examples, defaults and enums first, then the
    required properties only, each filled by its type within its bounds. Callers validate it before
    publishing it (a `pattern` is not interpreted)."""
    for key in ("examples", "default", "const", "enum"):
        if key in schema and schema[key] is not None:
            value = schema[key]
            if key in ("examples", "enum"):
                if value:
                    return value[0]
                continue
            return value
    for key in ("anyOf", "oneOf"):
        options = [o for o in schema.get(key, []) if o.get("type") != "null"]
        if options:
            return example_of(options[0])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        return {name: example_of(props.get(name, {})) for name in schema.get("required", [])}
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1)))
        return [example_of(schema.get("items", {})) for _ in range(count)]
    if kind == "integer" or kind == "number":
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + (1 if "exclusiveMinimum" in schema else 0))
        value = max(low, 1) if "maximum" not in schema else min(max(low, 1), schema["maximum"])
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return False
    if kind == "string":
        if schema.get("format") in _FORMATS:
            return _FORMATS[schema["format"]]
        text = "example"
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        text = text.ljust(low, "x")
        return text[: int(high)] if high is not None else text
    return None
