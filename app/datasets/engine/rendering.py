"""The rendering rule in SQL: values are rendered and cut to what an answer shows before DuckDB hands them
to Python (`capped_query`, `capped_columns`: a long text, blob, list or struct is cut in SQL, and the
dates, times and intervals Python cannot take whole are rendered to text), and a page of rows is capped
in bytes (`fetch_capped`, `PAGE_MAX_BYTES`), so a result of huge cells costs its reader little memory.
`json_export_columns` writes a JSON export's numbers by the same rule."""

from __future__ import annotations

from typing import Any

import duckdb
from duckdb.sqltypes import DuckDBPyType

from app.datasets.engine.sandbox import ident
from app.datasets.engine.sandbox import sql_string as lit
from app.datasets.engine.values import BLOB_BYTES, CELL_CHARS, DECIMAL_TYPE, LIST_ITEMS, jsonable

# The most a page of rows read from DuckDB may weigh (about: characters of text, 8 per other value); a
# page stops early rather than pass it (a reply's token budget is far below it anyway).
PAGE_MAX_BYTES = 2 * 1024 * 1024


def json_export_columns(con: duckdb.DuckDBPyConnection, relation: str) -> str:
    """A select list of every column of `relation` for a JSON export: DECIMALs with a fraction, DOUBLEs
    and REALs, at any depth, are written by the rendering rule (a DECIMAL as a number when its float64
    reads back as the value, else its exact digits as text, which DuckDB's JSON reader, parsing every
    number as a float64, would round; NaN and infinities as "NaN", "Infinity", "-Infinity" rather than
    the bare words DuckDB writes and strict JSON readers refuse); everything else as DuckDB writes it."""
    rel = con.sql(f"SELECT * FROM {relation}")
    if rel is None:
        return "*"
    parts = [
        f"{shown} AS {ident(name)}" if (shown := _json_number(ident(name), dtype, 0)) else ident(name)
        for name, dtype in zip(rel.columns, rel.types, strict=True)
    ]
    return ", ".join(parts) or "*"


def _json_number(expr: str, dtype: DuckDBPyType, depth: int) -> str | None:
    """`expr` (of type `dtype`) with its numbers as `json_export_columns` writes them; None when DuckDB's
    own writer already writes it so."""
    kind = str(dtype.id)
    decimal_type = DECIMAL_TYPE.fullmatch(str(dtype))
    if kind == "decimal" and decimal_type and int(decimal_type.group(2)) > 0:
        back = f"TRY_CAST(CAST({expr} AS DOUBLE) AS {dtype})"
        return (
            f"CASE WHEN {back} = {expr} THEN CAST(CAST({expr} AS DOUBLE) AS JSON)"
            f" ELSE to_json(CAST({expr} AS VARCHAR)) END"
        )
    if kind in ("float", "double"):
        return (
            f"CASE WHEN {expr} IS NULL OR isfinite({expr}) THEN CAST({expr} AS JSON)"
            f""" WHEN isnan({expr}) THEN '"NaN"'::JSON WHEN {expr} > 0 THEN '"Infinity"'::JSON"""
            """ ELSE '"-Infinity"'::JSON END"""
        )
    if kind not in ("list", "array", "struct", "map") or depth >= 8:
        return None
    members = [(name, sub) for name, sub in dtype.children if isinstance(sub, DuckDBPyType)]
    var = f"_j{depth}"
    if kind in ("list", "array"):
        item = _json_number(var, members[0][1], depth + 1)
        return None if item is None else f"[{item} FOR {var} IN {expr}]"
    if kind == "map":
        value = _json_number(f"{var}.value", members[1][1], depth + 1)
        entries = f"map_entries({expr})"
        return (
            None
            if value is None
            else f"map_from_entries([{{'key': {var}.key, 'value': {value}}} FOR {var} IN {entries}])"
        )
    fields = [(name, f"struct_extract({expr}, {lit(name)})", sub) for name, sub in members]
    shown = [(name, field, _json_number(field, sub, depth + 1)) for name, field, sub in fields]
    if all(s is None for _, _, s in shown):
        return None
    packed = ", ".join(f"{ident(name)} := {s or field}" for name, field, s in shown)
    return f"CASE WHEN {expr} IS NULL THEN NULL ELSE struct_pack({packed}) END"


# Types whose values have a small fixed size and reach Python whole: nothing to cut or render.
_FIXED = frozenset(
    {
        "boolean",
        "tinyint",
        "smallint",
        "integer",
        "bigint",
        "hugeint",
        "utinyint",
        "usmallint",
        "uinteger",
        "ubigint",
        "uhugeint",
        "float",
        "double",
        "decimal",
        "uuid",
        "enum",
        "null",
    }
)
# Rendered as DuckDB's text of them: an INTERVAL keeps its months, a TIME_NS its nanoseconds.
_AS_TEXT = frozenset({"date", "time", "time_ns", "interval"})
# Rendered as DuckDB's text in ISO 8601 (see `iso_text`): nanoseconds and infinities are kept.
_TIMESTAMPS = frozenset(
    {"timestamp", "timestamp_s", "timestamp_ms", "timestamp_ns", "timestamp with time zone", "time with time zone"}
)
# Type nodes one projection cuts item by item; past that (or 8 levels down) a value is cut as text.
_CUT_NODES = 400


def iso_text(text: str) -> str:
    """An SQL expression: DuckDB's text of a timestamp or TIMETZ (`text`, an expression) in ISO 8601,
    with a 'T' between date and time and an offset of whole hours written '+00:00' (locked databases
    run in UTC, see `databases.open_locked`)."""
    return f"regexp_replace(regexp_replace({text}, ' ', 'T'), '([+-][0-9][0-9])$', '\\1:00')"


def _shown(expr: str, dtype: DuckDBPyType, budget: list[int], depth: int, cut: bool = True) -> str | None:
    """An expression giving what `jsonable` shows of `expr` (of type `dtype`) and nothing more: dates and
    times rendered to text (see `_AS_TEXT`, `_TIMESTAMPS`), and with `cut`, the first CELL_CHARS + 1
    characters of a text (so that it is still seen as cut), BLOB_BYTES + 1 bytes of a blob, LIST_ITEMS
    items of a list, struct or map, each cut the same way. None when the value reaches Python as it is
    shown. `budget` counts down the type nodes cut item by item (see `_CUT_NODES`)."""
    kind = str(dtype.id)
    # format() rather than CAST: DuckDB's CSV reader answers a cast to VARCHAR of a column it reads
    # with the column's raw text ('29/02/2024', '1:02:03'), not the text of the parsed value.
    if kind in _TIMESTAMPS:
        return iso_text(f"format('{{}}', {expr})")
    if kind in _AS_TEXT:
        return f"format('{{}}', {expr})"
    if kind == "float" and cut:  # a REAL as its shortest text reads, not the noise of its double
        return f"CAST(CAST({expr} AS VARCHAR) AS DOUBLE)"
    if kind in _FIXED:
        return None
    budget[0] -= 1
    if kind == "varchar":
        return f"left({expr}, {CELL_CHARS + 1})" if cut else None
    if kind == "blob":
        return f"{expr}[1:{BLOB_BYTES + 1}]" if cut else None
    members = _members(dtype) if kind in _NESTED else []
    if members and budget[0] > 0 and depth < 8:
        if kind in ("list", "array"):
            return _shown_list(expr, dtype, members[0][1], budget, depth, cut)
        if kind == "struct":
            return _shown_struct(expr, members, budget, depth, cut)
        if kind == "map":
            return _shown_map(expr, members[1][1], budget, depth, cut)
        if all(_shown(f"_v{depth}", sub, [_CUT_NODES], depth + 1, cut) is None for _, sub in members):
            return None  # a union of members that reach Python as they are shown
    return f"left(CAST({expr} AS VARCHAR), {CELL_CHARS + 1})" if cut else None


_NESTED = frozenset({"list", "array", "struct", "map", "union"})


def _members(dtype: DuckDBPyType) -> list[tuple[str, DuckDBPyType]]:
    """The member types of a nested type (a list's item, a struct's fields, a map's key and value)."""
    return [(name, sub) for name, sub in dtype.children if isinstance(sub, DuckDBPyType)]


def _shown_list(
    expr: str, dtype: DuckDBPyType, item_type: DuckDBPyType, budget: list[int], depth: int, cut: bool
) -> str | None:
    """`_shown` of a list or array: its first LIST_ITEMS items (with `cut`), each shown."""
    var = f"_v{depth}"
    item = _shown(var, item_type, budget, depth + 1, cut)
    size = [n for name, n in dtype.children if name == "size" and isinstance(n, int)]
    if item is None and (not cut or (size and size[0] <= LIST_ITEMS)):
        return None
    sliced = f"list_slice({expr}, 1, {LIST_ITEMS})" if cut else expr
    return sliced if item is None else f"[{item} FOR {var} IN {sliced}]"


def _shown_struct(
    expr: str, members: list[tuple[str, DuckDBPyType]], budget: list[int], depth: int, cut: bool
) -> str | None:
    """`_shown` of a struct: its first LIST_ITEMS fields (with `cut`), each shown."""
    fields = [(name, f"struct_extract({expr}, {lit(name)})", sub) for name, sub in members]
    kept = [
        (name, field, _shown(field, sub, budget, depth + 1, cut))
        for name, field, sub in (fields[:LIST_ITEMS] if cut else fields)
    ]
    if len(kept) == len(fields) and all(shown is None for _, _, shown in kept):
        return None
    packed = ", ".join(f"{ident(name)} := {shown or field}" for name, field, shown in kept)
    return f"CASE WHEN {expr} IS NULL THEN NULL ELSE struct_pack({packed}) END"


def _shown_map(expr: str, value_type: DuckDBPyType, budget: list[int], depth: int, cut: bool) -> str | None:
    """`_shown` of a map: its first LIST_ITEMS entries (with `cut`), each value shown."""
    var = f"_v{depth}"
    value = _shown(f"{var}.value", value_type, budget, depth + 1, cut)
    if value is None and not cut:
        return None
    entries = f"list_slice(map_entries({expr}), 1, {LIST_ITEMS})" if cut else f"map_entries({expr})"
    return f"map_from_entries([{{'key': {var}.key, 'value': {value or var + '.value'}}} FOR {var} IN {entries}])"


def capped_query(
    con: duckdb.DuckDBPyConnection, source: str, columns: list[str] | None = None, cut: bool = True
) -> tuple[str, list[str]]:
    """A query of the `columns` (default all) of the table expression `source` whose values are rendered
    and (with `cut`) cut in SQL to what `jsonable` shows of them (see `_shown`): a huge text or list
    never reaches Python whole. Returns the query and the column names."""
    picked = ", ".join(ident(c) for c in columns) if columns else "*"
    inner = f"SELECT {picked} FROM {source}"
    rel = con.sql(inner)
    if rel is None:
        return inner, []
    names = list(rel.columns)
    return capped_select(inner, names, list(rel.types), cut), names


def capped_select(inner: str, names: list[str], types: list[DuckDBPyType], cut: bool = True) -> str:
    """`capped_query` of the query `inner`, whose columns' names and types the caller knows."""
    if not names:
        return inner
    budget = [_CUT_NODES]
    # Positional aliases: a result may hold two columns of one name.
    aliases = [f"_c{i}" for i in range(len(names))]
    cuts = [_shown(alias, dtype, budget, 0, cut) for alias, dtype in zip(aliases, types, strict=True)]
    if all(c is None for c in cuts):
        return inner
    exprs = ", ".join(f"{c or alias} AS {ident(name)}" for alias, c, name in zip(aliases, cuts, names, strict=True))
    return f"SELECT {exprs} FROM ({inner}) AS _t({', '.join(aliases)})"


def capped_exprs(
    con: duckdb.DuckDBPyConnection, relation: str, columns: list[str], cut: bool = True, prefix: str = ""
) -> list[str]:
    """For each of `columns` (distinct names) of `relation` (a view, or a table expression with those
    columns), an expression of it rendered and cut in SQL as `capped_query` does; with `prefix` (e.g.
    `"p."`), of `prefix + column` instead (a struct holding the relation's columns)."""
    rel = con.sql(f"SELECT {', '.join(ident(c) for c in columns)} FROM {relation}")
    if rel is None:
        return [prefix + ident(c) for c in columns]
    budget = [_CUT_NODES]
    return [
        _shown(prefix + ident(name), dtype, budget, 0, cut) or prefix + ident(name)
        for name, dtype in zip(rel.columns, rel.types, strict=True)
    ]


def capped_columns(con: duckdb.DuckDBPyConnection, relation: str, columns: list[str], cut: bool = True) -> str:
    """A select list of `columns` (distinct names) of `relation` whose values are rendered and cut in SQL
    as `capped_query` does (see `capped_exprs`), each named as its column."""
    exprs = capped_exprs(con, relation, columns, cut)
    return ", ".join(e if e == ident(c) else f"{e} AS {ident(c)}" for c, e in zip(columns, exprs, strict=True))


def fetch_capped(
    cur: duckdb.DuckDBPyConnection, names: list[str], limit: int, max_bytes: int = PAGE_MAX_BYTES
) -> list[dict[str, Any]]:
    """Up to `limit` rows of the executed query `cur` as JSON-safe dicts, stopping before the rows weigh
    more than `max_bytes` (at least one row)."""
    rows: list[dict[str, Any]] = []
    used = 0
    while len(rows) < limit:
        chunk = cur.fetchmany(min(1024, limit - len(rows)))
        if not chunk:
            break
        for values in chunk:
            row = {c: jsonable(v) for c, v in zip(names, values, strict=False)}
            used += _weight(row)
            if rows and used > max_bytes:
                return rows
            rows.append(row)
    return rows


def _weight(value: Any) -> int:
    """About how many bytes `value` (a JSON-safe value) takes in a reply."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, dict):
        return 2 + sum(len(k) + 3 + _weight(v) for k, v in value.items())
    if isinstance(value, list):
        return 2 + sum(_weight(v) + 1 for v in value)
    return 8
