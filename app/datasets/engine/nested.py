"""The inner fields of struct and list columns (nested JSON objects and arrays, Parquet groups), each
named by its path and read as a column of its own so a profile can describe it (`flat_queries`).

A struct's fields are read in place (`customer.address.city`); a list's items are unnested, one value
per item (`items[].sku`, `tags[]`). A list inside a list, a map and a union are described as one value
(their inner fields are not unnested twice)."""

from __future__ import annotations

from dataclasses import dataclass

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
