"""The inner fields of struct and list columns (nested JSON objects and arrays, Parquet groups), each
named by its path and read as a column of its own so a profile can describe it (`flat_queries`).

A JSON column (DuckDB's JSON type: a field whose values are objects in some rows and text or arrays in
others) holds JSON text: its values are shown parsed (`parsed`) and described by their kinds
(`json_kinds`).

A struct's fields are read in place (`customer.address.city`); a list's items are unnested, one value
per item (`items[].sku`, `tags[]`). A list inside a list, a map and a union are described as one value
(their inner fields are not unnested twice)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from duckdb.sqltypes import DuckDBPyType

from app.datasets.engine.sandbox import ident
from app.datasets.engine.sandbox import sql_string as lit

# The most inner fields described per column, and how deep paths go.
MAX_FIELDS = 24
MAX_DEPTH = 4
_MAX_WALKED = 10_000
_ITEM = "__cairn_item"


@dataclass(frozen=True)
class Leaf:
    """One inner field: its path, its SQL over a row (or over a list's item), the list it lies in."""

    path: str
    expr: str
    within: str | None


def is_nested(dtype: DuckDBPyType) -> bool:
    """True for a struct or list (array) type, whose inner fields a profile describes."""
    return str(dtype.id) in ("struct", "list", "array")


def leaves(name: str, dtype: DuckDBPyType) -> list[Leaf]:
    """The inner fields of column `name` (of type `dtype`) in schema order, all of them (at most
    _MAX_WALKED); a profile describes the first MAX_FIELDS."""
    found: list[Leaf] = []
    _walk(ident(name), name, dtype, None, 0, found)
    return found


def _walk(expr: str, path: str, dtype: DuckDBPyType, within: str | None, depth: int, found: list[Leaf]) -> None:
    kind = str(dtype.id)
    members = (
        [(n, sub) for n, sub in dtype.children if isinstance(sub, DuckDBPyType)]
        if kind in ("struct", "list", "array")
        else []
    )
    if len(found) >= _MAX_WALKED:
        return
    if kind == "struct" and members and depth < MAX_DEPTH:
        for field, sub in members:
            _walk(f"struct_extract({expr}, {lit(field)})", f"{path}.{field}", sub, within, depth + 1, found)
        return
    if kind in ("list", "array") and members and within is None and depth < MAX_DEPTH:
        _walk(_ITEM, f"{path}[]", members[0][1], expr, depth + 1, found)
        return
    if depth > 0:
        found.append(Leaf(path, expr, within))


def flat_queries(relation: str, name: str, dtype: DuckDBPyType) -> list[str]:
    """Queries over `relation` whose columns are the inner fields of its column `name`, each named by
    its path: one for the fields read in place, one per list whose items are unnested."""
    groups: dict[str | None, list[Leaf]] = {}
    for leaf in leaves(name, dtype)[:MAX_FIELDS]:
        groups.setdefault(leaf.within, []).append(leaf)
    out: list[str] = []
    for within, found in groups.items():
        cols = ", ".join(f"{leaf.expr} AS {ident(leaf.path)}" for leaf in found)
        if within is None:
            out.append(f"SELECT {cols} FROM {relation}")
        else:
            out.append(f"SELECT {cols} FROM (SELECT unnest({within}) AS {_ITEM} FROM {relation})")
    return out


_KINDS = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}


def parsed(value: Any) -> Any:
    """The value of a JSON column's text (an object, array, string, number…); the text itself when it
    is not whole JSON (cut to what a reply shows, say)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def json_kinds(texts: list[Any]) -> dict[str, int]:
    """How many of the JSON texts `texts` (nulls left out) are objects, arrays, strings, numbers,
    booleans or nulls, most first; a text that does not parse counts as 'text'."""
    counted: Counter[str] = Counter()
    for text in texts:
        if text is None:
            continue
        value = parsed(text)
        if value is text and isinstance(text, str) and text.strip()[:1] in ("{", "["):
            counted["text"] += 1  # cut short: not whole JSON
        else:
            counted[_KINDS.get(type(value), "null")] += 1
    return dict(counted.most_common())
