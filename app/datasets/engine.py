"""DuckDB work. The functions taking an `EngineConfig` first are synchronous and run in a DuckDB worker
process (`app.datasets.worker`): the server calls them through `offload` (or `offload_sync` from a
thread), never directly, so that it can kill work that outruns its time limit. Each call leases a
pooled locked-down database of that process for its duration, with its own connection and views
(see `sandbox`).

Values reach Python cut to what a reply can show (`capped_query`: long text, blobs, lists and
structs are cut in SQL, before DuckDB hands them over) and a page of rows is capped in bytes
(`PAGE_MAX_BYTES`), so a result of huge cells costs its reader little memory."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import difflib
import json
import math
import os
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

import duckdb
from duckdb.sqltypes import DuckDBPyType

from app.core.errors import (
    CairnError,
    EngineError,
    Forbidden,
    MemoryLimit,
    NotFound,
    QueryError,
    SchemaError,
    Timeout,
)
from app.datasets import worker
from app.datasets.cache import fingerprint
from app.datasets.sandbox import (
    POOL,
    Lease,
    Lockdown,
    TimedOut,
    answer_early,
    duckdb_context,
    file_format,
    first_line,
    ident,
    inside,
    run_with_timeout,
    time_left,
)
from app.datasets.sandbox import sql_string as lit

if TYPE_CHECKING:
    import asyncio

T = TypeVar("T")
P = ParamSpec("P")
# What `jsonable` keeps of a value: the characters of a text, the items of a list or struct, the bytes
# of a blob.
CELL_CHARS = 300
LIST_ITEMS = 50
BLOB_BYTES = 96
# The most a page of rows read from DuckDB may weigh (about: characters of text, 8 per other value); a
# page stops early rather than pass it (a reply's token budget is far below it anyway).
PAGE_MAX_BYTES = 2 * 1024 * 1024
# A worker process spills into a folder of its own under the work directory's `tmp` (see `use_scratch`).
_scratch: str | None = None


@dataclass(frozen=True)
class EngineConfig:
    """Where DuckDB may read and write, and its limits."""

    roots: list[Path]
    work: Path
    memory_limit: str
    threads: int
    timeout_s: float
    concurrency: int = 2

    @property
    def results(self) -> Path:
        return self.work / "results"

    @property
    def allowed(self) -> list[Path]:
        return [*self.roots, self.results]

    def lockdown(self, threads: int | None = None) -> Lockdown:
        """The locked-database settings of this configuration (the connection pool's key)."""
        return Lockdown(
            allowed=tuple(str(p) for p in self.allowed),
            temp_dir=str(self.work / "tmp" / _scratch) if _scratch else str(self.work / "tmp"),
            memory_limit=self.memory_limit,
            threads=threads or self.threads,
        )


@dataclass
class Source:
    """One input: a view name and the files (or glob pattern) behind it."""

    name: str
    pattern: str
    files: list[Path]
    fmt: str

    def sql(self, sample_size: int | None = None) -> str:
        """The DuckDB table function reading this source (its definition: cache keys use this)."""
        if self.fmt == "parquet":
            return f"read_parquet({lit(self.pattern)}, union_by_name = true)"
        if self.fmt == "json":
            return f"read_json_auto({lit(self.pattern)})"
        return f"read_csv_auto({lit(self.pattern)}{self._csv_options(sample_size)})"

    def _csv_options(self, sample_size: int | None) -> str:
        opts = ", nullstr = ['', 'NA', 'N/A', 'NULL', 'null']"
        opts += ", union_by_name = true" if len(self.files) > 1 else ""
        if sample_size:
            opts += f", sample_size = {int(sample_size)}"
        return opts

    def bound_sql(self, con: duckdb.DuckDBPyConnection, sample_size: int | None = None) -> str:
        """`sql()` as a view is made from it: a single CSV file also names the dialect DuckDB's sniffer
        found for it (see `csv_dialect`), which reads the same rows without searching again."""
        if self.fmt != "csv" or len(self.files) != 1 or self.pattern != str(self.files[0]):
            return self.sql(sample_size)
        opts = self._csv_options(sample_size)
        return f"read_csv_auto({lit(self.pattern)}{opts}{csv_dialect(con, self.pattern, opts)})"


# Binding a view over a CSV file runs DuckDB's sniffer, and most of its cost (milliseconds even for a
# small file) is the dialect search; the types and header are found again at every bind regardless.
# The dialect found once per file version (path, size, mtime) is named in later views: DuckDB's
# `sniff_csv` reports exactly what `read_csv_auto` would detect with the same options.
_DIALECTS: OrderedDict[tuple[str, int, int, str], str] = OrderedDict()
_DIALECTS_LOCK = threading.Lock()
_DIALECTS_MAX = 512
_NEW_LINES = ("\\n", "\\r\\n", "\\r")


def csv_dialect(con: duckdb.DuckDBPyConnection, path: str, opts: str) -> str:
    """`, delim = …, quote = …, escape = …, new_line = …, comment = …, skip = …` as DuckDB's sniffer
    detects them for the CSV file `path` read with `opts`; '' when it cannot tell (the view then
    sniffs as before)."""
    try:
        st = os.stat(path)
    except OSError:
        return ""
    key = (path, st.st_size, st.st_mtime_ns, opts)
    with _DIALECTS_LOCK:
        known = _DIALECTS.get(key)
        if known is not None:
            _DIALECTS.move_to_end(key)
            return known
    try:
        row = con.execute(
            f"SELECT Delimiter, Quote, Escape, NewLineDelimiter, Comment, SkipRows FROM sniff_csv({lit(path)}{opts})"
        ).fetchone()
    except duckdb.Error:
        return ""
    if row is None:
        return ""
    delim, quote, escape, new_line, comment = ("" if v == "(empty)" else str(v) for v in row[:5])
    if not delim or new_line not in _NEW_LINES:
        return ""
    found = (
        f", delim = {lit(delim)}, quote = {lit(quote)}, escape = {lit(escape)}, new_line = {lit(new_line)}"
        f", comment = {lit(comment)}, skip = {int(row[5])}"
    )
    with _DIALECTS_LOCK:
        _DIALECTS[key] = found
        while len(_DIALECTS) > _DIALECTS_MAX:
            _DIALECTS.popitem(last=False)
    return found


def make_source(name: str, pattern: str, files: list[Path]) -> Source:
    """A Source for a resolved pattern (the format comes from the first file)."""
    return Source(name=name, pattern=pattern, files=files, fmt=file_format(str(files[0]) if files else pattern))


def use_scratch(name: str) -> None:
    """Spill into `<work>/tmp/<name>` (a worker process names its own, which the server removes once the
    process is gone: a killed DuckDB leaves its spill files behind)."""
    global _scratch
    _scratch = name


# ---------------------------------------------------------------------------------------------- workers

_caller: ContextVar[str] = ContextVar("cairn_datasets_caller", default="")


def set_caller(caller: str) -> None:
    """Name the API key the current call (task) works for: the engine slots are shared between keys
    (`worker.FairSlots`)."""
    _caller.set(caller)


async def offload(
    fn: Callable[Concatenate[EngineConfig, P], T], cfg: EngineConfig, *args: P.args, **kwargs: P.kwargs
) -> T:
    """`fn(cfg, *args, **kwargs)` run in a DuckDB worker process, once an engine slot is free for the
    caller (`set_caller`). `fn` is a module-level function of the engine (a reference to it travels, not
    its code); its arguments and value travel as pickles. Past `cfg.timeout_s` the statement is
    interrupted, and a worker that does not answer soon after is killed: 5003 either way."""
    value = await worker.pool_for(cfg).run(_caller.get(), fn, cfg, args, kwargs)
    return cast(T, value)


async def offload_staged(
    fn: Callable[Concatenate[EngineConfig, P], T], cfg: EngineConfig, *args: P.args, **kwargs: P.kwargs
) -> tuple[T, asyncio.Future[T] | None]:
    """`offload` for a function that may answer before it ends (`sandbox.answer_early`): its early
    value and the future of its final value (which raises what the function raised after answering),
    or its value and None when it answered only once."""
    value, final = await worker.pool_for(cfg).run_staged(_caller.get(), fn, cfg, args, kwargs)
    return cast(T, value), final


def offload_sync(
    fn: Callable[Concatenate[EngineConfig, P], T], cfg: EngineConfig, *args: P.args, **kwargs: P.kwargs
) -> T:
    """`offload` for code running in a thread (it blocks the thread while it waits)."""
    return cast(T, worker.pool_for(cfg).run_sync(_caller.get(), fn, cfg, args, kwargs))


# ---------------------------------------------------------------------------------------------- values
#
# One rendering rule for every value an answer shows (its table is in docs/datasets.md). Values Python
# cannot take whole from DuckDB (an INTERVAL's months, nanoseconds, infinite dates) are rendered to text
# in SQL by `_shown`, with every other date and time so that all of them read alike; `jsonable` renders
# what reaches Python.

# The largest integer a JSON reader (a float64) holds exactly: past it, integers travel as text.
SAFE_INTEGER = 2**53 - 1
_FRACTION_ZEROS = re.compile(r"(\.\d*?[1-9])0+(?=\D|$)")
_WIDE = decimal.Context(prec=100, rounding=decimal.ROUND_HALF_UP)
_DECIMAL_TYPE = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")


def jsonable(value: Any, cut: bool = True) -> Any:
    """A DuckDB value as JSON by the rendering rule: integers and decimals as numbers when a float64
    holds them exactly (else their exact digits as a string), NaN and infinities as "NaN", "Infinity"
    and "-Infinity", dates and times in ISO 8601 (UTC for TIMESTAMPTZ), UUIDs as text, blobs as
    "base64:…", lists as arrays, structs and maps as objects. `cut` bounds it to what an answer shows
    (CELL_CHARS characters of a text, BLOB_BYTES bytes of a blob, LIST_ITEMS items); an export keeps it
    whole."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -SAFE_INTEGER <= value <= SAFE_INTEGER else str(value)
    if isinstance(value, str):
        return value[:CELL_CHARS] + "…" if cut and len(value) > CELL_CHARS else value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, decimal.Decimal):
        return _decimal(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return _iso(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        more = cut and len(raw) > BLOB_BYTES
        return "base64:" + base64.b64encode(raw[:BLOB_BYTES] if more else raw).decode() + ("…" if more else "")
    if isinstance(value, dict):
        items = list(value.items())
        return {_key(k): jsonable(v, cut) for k, v in (items[:LIST_ITEMS] if cut else items)}
    if isinstance(value, list | tuple):
        return [jsonable(v, cut) for v in (value[:LIST_ITEMS] if cut else value)]
    text = str(value)
    return text[:CELL_CHARS] if cut else text


def _decimal(value: decimal.Decimal) -> Any:
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int) or not value.is_finite():
        return str(value)
    if exponent >= 0:  # DECIMAL(p, 0), e.g. a stored HUGEINT
        return jsonable(int(value))
    f = float(value)
    # The test of `json_export_columns` in SQL: the float64 rounded to the value's scale gives it back.
    back = _WIDE.quantize(decimal.Decimal(f), decimal.Decimal((0, (1,), exponent)))
    return f if back == value else str(value)


def _iso(value: dt.datetime | dt.date | dt.time) -> str:
    """ISO 8601 as `_shown` renders it in SQL (UTC for an aware timestamp, no trailing zeros in a
    fraction): for a date or time that reached Python without being rendered there."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        value = value.astimezone(dt.UTC)
    return _FRACTION_ZEROS.sub(r"\1", value.isoformat())


def _key(key: Any) -> str:
    shown = jsonable(key)
    return shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False)


def cell_text(value: Any) -> str:
    """A rendered value (what `jsonable` gives) as the text of one CSV or spreadsheet cell: '' for
    NULL, compact JSON for booleans, numbers, lists and objects."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


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
    decimal_type = _DECIMAL_TYPE.fullmatch(str(dtype))
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


def rows_as_dicts(columns: list[str], rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Rows as JSON-safe dicts."""
    return [{c: jsonable(v) for c, v in zip(columns, row, strict=False)} for row in rows]


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
    run in UTC, see `sandbox.open_locked`)."""
    return f"regexp_replace(regexp_replace({text}, ' ', 'T'), '([+-][0-9][0-9])$', '\\1:00')"


def _shown(expr: str, dtype: DuckDBPyType, budget: list[int], depth: int, cut: bool = True) -> str | None:
    """An expression giving what `jsonable` shows of `expr` (of type `dtype`) and nothing more: dates and
    times rendered to text (see `_AS_TEXT`, `_TIMESTAMPS`), and with `cut`, the first CELL_CHARS + 1
    characters of a text (so that it is still seen as cut), BLOB_BYTES + 1 bytes of a blob, LIST_ITEMS
    items of a list, struct or map, each cut the same way. None when the value reaches Python as it is
    shown."""
    kind = str(dtype.id)
    # format() rather than CAST: DuckDB's CSV reader answers a cast to VARCHAR of a column it reads
    # with the column's raw text ('29/02/2024', '1:02:03'), not the text of the parsed value.
    if kind in _TIMESTAMPS:
        return iso_text(f"format('{{}}', {expr})")
    if kind in _AS_TEXT:
        return f"format('{{}}', {expr})"
    if kind in _FIXED:
        return None
    budget[0] -= 1
    if kind == "varchar":
        return f"left({expr}, {CELL_CHARS + 1})" if cut else None
    if kind == "blob":
        return f"{expr}[1:{BLOB_BYTES + 1}]" if cut else None
    nested = kind in ("list", "array", "struct", "map", "union")
    members = [(name, sub) for name, sub in dtype.children if isinstance(sub, DuckDBPyType)] if nested else []
    if members and budget[0] > 0 and depth < 8:
        var = f"_v{depth}"
        if kind in ("list", "array"):
            item = _shown(var, members[0][1], budget, depth + 1, cut)
            size = [n for name, n in dtype.children if name == "size" and isinstance(n, int)]
            if item is None and (not cut or (size and size[0] <= LIST_ITEMS)):
                return None
            sliced = f"list_slice({expr}, 1, {LIST_ITEMS})" if cut else expr
            return sliced if item is None else f"[{item} FOR {var} IN {sliced}]"
        if kind == "struct":
            fields = [(name, f"struct_extract({expr}, {lit(name)})", sub) for name, sub in members]
            kept = [
                (name, field, _shown(field, sub, budget, depth + 1, cut))
                for name, field, sub in (fields[:LIST_ITEMS] if cut else fields)
            ]
            if len(kept) == len(fields) and all(shown is None for _, _, shown in kept):
                return None
            packed = ", ".join(f"{ident(name)} := {shown or field}" for name, field, shown in kept)
            return f"CASE WHEN {expr} IS NULL THEN NULL ELSE struct_pack({packed}) END"
        if kind == "map":
            value = _shown(f"{var}.value", members[1][1], budget, depth + 1, cut)
            if value is None and not cut:
                return None
            entries = f"list_slice(map_entries({expr}), 1, {LIST_ITEMS})" if cut else f"map_entries({expr})"
            return (
                f"map_from_entries([{{'key': {var}.key, 'value': {value or var + '.value'}}} FOR {var} IN {entries}])"
            )
        if kind == "union" and all(_shown(var, sub, [_CUT_NODES], depth + 1, cut) is None for _, sub in members):
            return None
    return f"left(CAST({expr} AS VARCHAR), {CELL_CHARS + 1})" if cut else None


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


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KB'."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


# ---------------------------------------------------------------------------------------------- errors


def _columns_of(con: duckdb.DuckDBPyConnection, sources: list[Source]) -> list[str]:
    names: list[str] = []
    for src in sources:
        try:
            names += [r[0] for r in con.execute(f"DESCRIBE {ident(src.name)}").fetchall()]
        except duckdb.Error:
            continue
    return names


_MISSING_COLUMN = re.compile(r'column "?([^"\s]+)"? not found', re.I)


def translate(exc: BaseException, known_columns: list[str] | None = None) -> CairnError:
    """A DuckDB exception as the caller's error, with bounded text and suggestions, and the place in
    the statement it points at (if any) as its query_context."""
    err = _translate(exc, known_columns)
    if isinstance(exc, duckdb.Error) and err.query_context is None:
        err.query_context = duckdb_context(str(exc))
    return err


def _translate(exc: BaseException, known_columns: list[str] | None = None) -> CairnError:
    if isinstance(exc, CairnError):
        return exc
    if isinstance(exc, TimedOut):
        return Timeout(
            "The query exceeded its time limit and was interrupted",
            suggestions=[
                "Filter or aggregate more, or query a Parquet copy of the data",
                "Raise CAIRN_DATASETS_QUERY_TIMEOUT_MS if this is expected",
            ],
        )
    msg = first_line(str(exc))
    if isinstance(exc, duckdb.PermissionException):
        return Forbidden(
            f"Access refused by the sandbox: {msg}", suggestions=["Only files inside the data roots can be read"]
        )
    if isinstance(exc, duckdb.OutOfMemoryException):
        return MemoryLimit(
            f"The query ran out of memory: {msg}",
            suggestions=["Aggregate or filter before selecting many columns", "Raise CAIRN_DATASETS_MEMORY_LIMIT"],
        )
    if isinstance(exc, duckdb.InterruptException):
        return Timeout("The query was interrupted")
    if isinstance(exc, duckdb.BinderException):
        m = _MISSING_COLUMN.search(str(exc))
        if m:
            missing = m.group(1)
            close = difflib.get_close_matches(missing, known_columns or [], n=3, cutoff=0.6)
            text = f"Column '{missing}' not found."
            if close:
                text += f" Did you mean '{close[0]}'?"
            return SchemaError(
                text,
                suggestions=[
                    "Check column names with profile_dataset",
                    *([f"Known columns include: {', '.join(close)}"] if close else []),
                ],
            )
        return SchemaError(msg, suggestions=["Check column names and types with profile_dataset"])
    if isinstance(exc, duckdb.CatalogException):
        return SchemaError(
            msg,
            suggestions=[
                "Tables are the names of the `files` you pass (see views in the "
                "result) or read_csv_auto('file.csv') calls"
            ],
        )
    if isinstance(exc, duckdb.ParserException):
        return QueryError(f"Syntax error: {msg}", suggestions=["Check the SQL syntax (DuckDB dialect)"])
    if isinstance(exc, duckdb.IOException):
        if "No files found" in str(exc) or "No such file" in str(exc):
            return NotFound(msg, suggestions=["list_datasets shows the available files"])
        return EngineError(f"Could not read the data: {msg}")
    if isinstance(exc, duckdb.ConversionException | duckdb.InvalidInputException | duckdb.InvalidTypeException):
        return QueryError(msg)
    if isinstance(exc, duckdb.Error):
        return EngineError(f"DuckDB failed: {msg}")
    raise exc


def _create_views(
    lease: Lease, sources: list[Source], result_views: dict[str, Path], sample_size: int | None = None
) -> None:
    # A view is made again when its files changed (it keeps the column types it was made with).
    wanted = {
        src.name: (f"SELECT * FROM {src.bound_sql(lease.con, sample_size)}", str(fingerprint(src.files)))
        for src in sources
    }
    for name, path in result_views.items():
        wanted[name] = (f"SELECT * FROM read_parquet({lit(str(path))})", str(fingerprint([path])))
    lease.use_views(wanted)


_slots: dict[int, threading.BoundedSemaphore] = {}
_slots_lock = threading.Lock()


def _slot(limit: int) -> threading.BoundedSemaphore:
    with _slots_lock:
        if limit not in _slots:
            _slots[limit] = threading.BoundedSemaphore(max(1, limit))
        return _slots[limit]


def run_locked(
    cfg: EngineConfig,
    sources: list[Source],
    fn: Callable[[duckdb.DuckDBPyConnection], T],
    *,
    result_views: dict[str, Path] | None = None,
    sample_size: int | None = None,
    threads: int | None = None,
) -> T:
    """Lease a locked database from the pool, make views over `sources`, run `fn` under the watchdog.
    At most `concurrency` calls hold a database at once; the time limit counts from when a call gets
    one (in a worker process, from when the request came: `sandbox.time_left`). The database goes back
    to the pool only after a call that ended normally or with an error about its statement, and once
    its views are dropped (see `sandbox.Lease`)."""
    with _slot(cfg.concurrency):
        known: list[str] = []
        try:
            with POOL.lease(cfg.lockdown(threads), keep=max(1, cfg.concurrency)) as lease:
                _create_views(lease, sources, result_views or {}, sample_size)
                con = lease.con
                try:
                    value, fired = run_with_timeout(con, time_left(cfg.timeout_s), lambda: fn(con))
                except (duckdb.BinderException, duckdb.CatalogException):
                    known = _columns_of(con, sources)
                    raise
                if fired:
                    lease.discard()
                return value
        except BaseException as exc:
            raise translate(exc, known) from None


def warm(cfg: EngineConfig) -> None:
    """Open a locked database of `cfg`'s lockdown and run one statement on it, leaving it in the pool
    (a new worker process does this before it takes calls)."""
    run_locked(cfg, [], lambda con: con.execute("SELECT 1").fetchall())


# ---------------------------------------------------------------------------------------------- query


@dataclass
class StoredResult:
    """A query result written to the result store."""

    path: Path
    columns: list[str]
    types: list[str]
    rows_stored: int
    rows_total: int
    elapsed_ms: int
    stored_truncated: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    head: list[dict[str, Any]] = field(default_factory=list)


def execute_to_store(
    cfg: EngineConfig,
    sql: str,
    sources: list[Source],
    result_views: dict[str, Path],
    dest: Path,
    max_rows: int,
    head: int = 0,
) -> StoredResult:
    """Run a checked SELECT and store up to `max_rows` rows as Parquet at `dest`. The first `head`
    stored rows come back as `head`, rendered as `read_rows` renders the stored file's rows.

    A result of at most `head` rows is all in the answer: when the caller takes early answers
    (`offload_staged`), it is answered before the file is written, and the final answer (the same
    value) once the file is in place.

    A SELECT runs once, into a temporary table of the call's connection (DuckDB spills it past its
    memory limit); its types, the Parquet file and the head are read from that table. Writing the file
    straight from the query and reading the head back from it took three binds of the query and one of
    the file more: about 2.5 ms of a 6 ms call over a small CSV."""
    started = time.perf_counter()

    select = _is_select(sql)

    def work(con: duckdb.DuckDBPyConnection) -> StoredResult:
        # Named for this process: the server removes what a worker killed mid-write left (worker.scrub).
        tmp = dest.with_name(f"{dest.stem}.{os.getpid()}.tmp")
        if select:
            held_rows = con.execute(f"CREATE TEMP TABLE {_HELD} AS SELECT * FROM (\n{sql}\n) LIMIT {int(max_rows)}")
            stored = int(held_rows.fetchone()[0])  # type: ignore[index]
            held = f"SELECT * FROM {_HELD}"
            # The held rows' types, from the statement that also reads the head when nothing is cut.
            first = con.execute(f"{held} LIMIT {max(0, int(head))}")
            described = first.description or []
            columns = [str(d[0]) for d in described]
            dtypes: list[DuckDBPyType] = [d[1] for d in described]
            kept = _storable(held, columns, dtypes)
            types = [str(t) for t in dtypes]
            rows: list[dict[str, Any]] | None = None
            if kept is None and head > 0 and capped_select(held, columns, dtypes) == held:
                rows = fetch_capped(first, columns, head)
            con.abort()  # what is left of it
            if kept is None and 0 < stored <= head and stored < max_rows:  # the whole result in the answer
                rows = rows if rows is not None else _head(con, kept, held, columns, dtypes, head)
                whole = StoredResult(dest, columns, types, stored, stored, _ms(started), head=rows)
                if len(rows) == stored and answer_early(whole):
                    _copy_parquet(con, held, tmp)
                    tmp.replace(dest)
                    return whole
            try:
                _copy_parquet(con, kept or held, tmp)
            except duckdb.ConversionException:
                if kept is None:
                    raise
                # An integer past 38 digits: its column is stored as its exact text instead.
                kept = _storable(held, columns, dtypes, _too_wide(con, held, dtypes))
                _copy_parquet(con, kept or held, tmp)
            if rows is None:
                rows = _head(con, kept, held, columns, dtypes, head) if head > 0 else []
        else:  # EXPLAIN: not a query a COPY can read; the relation holds its answer
            rel = con.sql(sql)
            if rel is None:
                raise QueryError("The statement returned no result")
            columns, types = list(rel.columns), [str(t) for t in rel.types]
            rel.limit(max_rows).write_parquet(str(tmp), compression="zstd")
            stored = int(con.execute(f"SELECT count(*) FROM read_parquet({lit(str(tmp))})").fetchone()[0])  # type: ignore[index]
            rows = _page(con, tmp, 0, head) if head > 0 else []
        total = stored
        if stored >= max_rows:
            total = int(con.execute(f"SELECT count(*) FROM (\n{sql}\n)").fetchone()[0])  # type: ignore[index]
        tmp.replace(dest)
        return StoredResult(
            path=dest,
            columns=columns,
            types=types,
            rows_stored=stored,
            rows_total=total,
            elapsed_ms=0,
            stored_truncated=total > stored,
            head=rows,
        )

    result = run_locked(cfg, sources, work, result_views=result_views)
    if not result.elapsed_ms:
        result.elapsed_ms = _ms(started)
    return result


def _ms(started: float) -> int:
    """Whole milliseconds since `started` (time.perf_counter)."""
    return int((time.perf_counter() - started) * 1000)


# The temporary table a query's result is held in while it is stored: the call's connection's own
# (views cannot be named so: `_view_name` strips leading underscores), gone when the connection closes.
_HELD = "temp.main._cairn_held"


def _head(
    con: duckdb.DuckDBPyConnection,
    kept: str | None,
    held: str,
    columns: list[str],
    dtypes: list[DuckDBPyType],
    limit: int,
) -> list[dict[str, Any]]:
    """The first `limit` rows of the held result as `read_rows` renders them from the stored file: the
    values `kept` (the storable query, when some column is stored as another type) cast them to."""
    if kept is not None:  # the stored types are the casts': bound from the query rather than spelled again
        query, names = capped_query(con, f"({kept})")
    else:
        query, names = capped_select(held, columns, dtypes), columns
    return fetch_capped(con.execute(f"{query} LIMIT {int(limit)}"), names, limit)


def _copy_parquet(con: duckdb.DuckDBPyConnection, query: str, path: Path) -> int:
    copy = f"COPY ({query}) TO {lit(str(path))} (FORMAT parquet, COMPRESSION zstd)"
    return int(con.execute(copy).fetchone()[0])  # type: ignore[index]


def _storable(
    query: str, columns: list[str], types: list[DuckDBPyType], wide: frozenset[int] = frozenset()
) -> str | None:
    """`query` with the values Parquet cannot hold (at any depth) cast to a type it can: HUGEINT and
    UHUGEINT to DECIMAL(38,0), or their text in the columns `wide` (Parquet keeps them only as a DOUBLE:
    a sum of integers would come back as 3.0, a 20-digit one rounded), and INTERVAL to its text (Parquet
    refuses a negative one and keeps only milliseconds). None when it holds none."""
    stored = [_stored_type(t, "VARCHAR" if i in wide else "DECIMAL(38,0)") for i, t in enumerate(types)]
    if all(t is None for t in stored):
        return None
    # Positional aliases: a result may hold two columns of one name.
    aliases = [f"_c{i}" for i in range(len(types))]
    exprs = ", ".join(
        f"{a if t is None else f'CAST({a} AS {t})'} AS {ident(name)}"
        for a, t, name in zip(aliases, stored, columns, strict=True)
    )
    return f"SELECT {exprs} FROM ({query}) AS _s({', '.join(aliases)})"


def _too_wide(con: duckdb.DuckDBPyConnection, query: str, types: list[DuckDBPyType]) -> frozenset[int]:
    """The columns of `query` holding a HUGEINT or UHUGEINT past 38 digits (any nested one counts)."""
    bound = "99999999999999999999999999999999999999"
    checks: dict[int, str] = {}
    for i, t in enumerate(types):
        kind = str(t.id)
        if kind in ("hugeint", "uhugeint"):
            checks[i] = f"bool_or(_c{i} > {bound}" + ("" if kind == "uhugeint" else f" OR _c{i} < -{bound}") + ")"
        elif _stored_type(t, "DECIMAL(38,0)") != _stored_type(t, "VARCHAR"):  # one nested in a list or struct
            checks[i] = "true"
    if not checks:
        return frozenset()
    aliases = ", ".join(f"_c{i}" for i in range(len(types)))
    row = con.execute(f"SELECT {', '.join(checks.values())} FROM ({query}) AS _s({aliases})").fetchone() or ()
    return frozenset(i for i, hit in zip(checks, row, strict=True) if hit)


def _stored_type(dtype: DuckDBPyType, integer: str) -> str | None:
    """The type `dtype` is stored as (see `_storable`); None when Parquet holds it as it is."""
    kind = str(dtype.id)
    if kind in ("hugeint", "uhugeint"):
        return integer
    if kind == "interval":
        return "VARCHAR"
    if kind not in ("list", "array", "struct", "map", "union"):
        return None
    members = [(name, sub) for name, sub in dtype.children if isinstance(sub, DuckDBPyType)]
    inner = [_stored_type(sub, integer) for _, sub in members]
    if all(t is None for t in inner):
        return None
    parts = [t or str(sub) for (_, sub), t in zip(members, inner, strict=True)]
    if kind == "list":
        return f"{parts[0]}[]"
    if kind == "array":
        size = [n for name, n in dtype.children if name == "size" and isinstance(n, int)]
        return f"{parts[0]}[{size[0]}]" if size else f"{parts[0]}[]"
    if kind == "map":
        return f"MAP({parts[0]}, {parts[1]})"
    fields = ", ".join(f"{ident(name)} {part}" for (name, _), part in zip(members, parts, strict=True))
    return f"{kind.upper()}({fields})"


def _is_select(sql: str) -> bool:
    """True when `sql` (one checked statement) is a SELECT, which can be nested in another statement."""
    try:
        return duckdb.extract_statements(sql)[0].type.name == "SELECT"
    except (duckdb.Error, IndexError):
        return False


def _page(
    con: duckdb.DuckDBPyConnection, path: Path, offset: int, limit: int, columns: list[str] | None = None
) -> list[dict[str, Any]]:
    query, names = capped_query(con, f"read_parquet({lit(str(path))})", columns)
    cur = con.execute(f"{query} LIMIT {int(limit)} OFFSET {int(offset)}")
    return fetch_capped(cur, names, limit)


def _gone() -> NotFound:
    return NotFound(
        "The stored result is gone (expired or evicted)", suggestions=["Run the query again to get a new query_id"]
    )


def read_rows(
    cfg: EngineConfig, path: Path, offset: int, limit: int, columns: list[str] | None = None
) -> list[dict[str, Any]]:
    """Rows `offset..offset+limit` of a stored result (a file of this server's result store): fewer when
    they would weigh more than `PAGE_MAX_BYTES`."""
    if not inside(path, [cfg.results]):
        raise _gone()

    def work(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
        try:
            return _page(con, path, offset, limit, columns)
        except duckdb.IOException:
            raise _gone() from None

    return run_locked(cfg, [], work)


def summarize_stored(
    cfg: EngineConfig,
    path: Path,
    offset: int = 0,
    max_columns: int = 40,
    described: list[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """A compact per-column summary of a stored result from row `offset` on. `described`: its columns'
    names and types, when the caller knows them."""
    if not inside(path, [cfg.results]):
        raise _gone()
    src = (
        f"SELECT * FROM read_parquet({lit(str(path))}) OFFSET {int(offset)}"
        if offset
        else f"SELECT * FROM read_parquet({lit(str(path))})"
    )

    def work(con: duckdb.DuckDBPyConnection) -> tuple[list[tuple[str, str]], tuple[Any, ...]]:
        cols = (
            described
            if described is not None
            else [(str(r[0]), str(r[1])) for r in con.execute(f"DESCRIBE {src}").fetchall()]
        )
        kept = cols[:max_columns]
        row = con.execute(_rest_summary_query(src, cols, len(kept))).fetchone()
        return cols, tuple(row or ())

    cols, row = run_locked(cfg, [], work)
    count = int(row[0]) if row else 0
    out: dict[str, Any] = {}
    for i, (name, ctype) in enumerate(cols[:max_columns]):
        cmin, cmax, approx, avg, std, values = row[1 + 6 * i : 7 + 6 * i]
        entry: dict[str, Any] = {
            "type": ctype,
            "min": extreme(cmin, ctype),
            "max": extreme(cmax, ctype),
            "distinct": approx,
            "null_pct": round(100.0 * (count - int(values)) / count, 2) if count else 0.0,
        }
        if avg is not None and is_numeric(ctype):
            entry["mean"] = _round(avg)
            entry["std"] = _round(std)
        out[name] = entry
    return {
        "rows": count,
        "from_row": offset,
        "columns": out,
        **({"columns_omitted": len(cols) - max_columns} if len(cols) > max_columns else {}),
    }


def _rest_summary_query(src: str, cols: list[tuple[str, str]], kept: int) -> str:
    """One pass over `src` (a SELECT with the columns `cols`): the row count, then for each of the first
    `kept` columns its min and max (as DuckDB's text, cut as `summary_query` cuts them), approximate
    distinct count, mean and standard deviation (numbers only) and count of values. Lighter than
    SUMMARIZE, which also computes quartiles."""
    cut = CELL_CHARS + 1
    aliases = [f"_c{i}" for i in range(len(cols))]
    parts = ["count(*)"]
    for alias, (_, ctype) in zip(aliases[:kept], cols[:kept], strict=True):
        t = ctype.upper()
        nested = t.endswith("]") or t.startswith(("STRUCT", "MAP", "UNION"))
        ends = []
        for fn in ("min", "max"):
            if nested:
                ends.append("NULL")
                continue
            text = f"CAST({fn}({alias}) AS VARCHAR)"
            if t.startswith("TIMESTAMP") or t == "TIME WITH TIME ZONE":
                text = iso_text(text)
            ends.append(f"left({text}, {cut})")
        numeric = is_numeric(t)
        parts += [
            *ends,
            f"approx_count_distinct(hash({alias}))",
            f"avg({alias})" if numeric else "NULL",
            f"stddev_samp({alias})" if numeric else "NULL",
            f"count({alias})",
        ]
    return f"SELECT {', '.join(parts)} FROM ({src}) AS _s({', '.join(aliases)})"


def summary_query(con: duckdb.DuckDBPyConnection, query: str, described: list[tuple[Any, ...]] | None = None) -> str:
    """DuckDB's SUMMARIZE of `query` (a SELECT), one row per column: name, type, min, max, approx_unique,
    avg, std, q25, q50, q75, count, null_percentage. min and max are DuckDB's text of the value, cut
    before they reach Python, a timestamp's or TIMETZ's in ISO 8601 as answers render it. `described`:
    the rows of `DESCRIBE query` when the caller has them."""
    cut = CELL_CHARS + 1
    # SUMMARIZE cannot average a TIME_NS: such columns are summarized as their text (in time order).
    described = described if described is not None else con.execute(f"DESCRIBE {query}").fetchall()
    ns = [str(r[0]) for r in described if str(r[1]) == "TIME_NS"]
    kind = "column_type"
    if ns:
        texts = ", ".join(f"CAST({ident(c)} AS VARCHAR) AS {ident(c)}" for c in ns)
        query = f"SELECT * REPLACE ({texts}) FROM ({query})"
        kind = f"CASE WHEN column_name IN ({', '.join(lit(c) for c in ns)}) THEN 'TIME_NS' ELSE column_type END"
    ends = [
        f"left(CASE WHEN column_type LIKE 'TIMESTAMP%' OR column_type = 'TIME WITH TIME ZONE' THEN {iso_text(e)}"
        f" ELSE {e} END, {cut})"
        for e in ("min", "max")
    ]
    return (
        f"SELECT column_name, {kind}, {ends[0]}, {ends[1]}, approx_unique, avg, std, q25, q50, q75, count,"
        f" null_percentage FROM (SUMMARIZE {query})"
    )


def extreme(text: str | None, ctype: str) -> Any:
    """A min or max of `summary_query` as answers render the value: exact for numbers (an integer or
    decimal by the rendering rule), else the text, cut to 40 characters."""
    if text is not None and is_numeric(ctype):
        try:
            exact = float(text) if ctype.upper() in ("FLOAT", "DOUBLE", "REAL") else decimal.Decimal(text)
            return jsonable(exact)
        except (ValueError, decimal.InvalidOperation):
            pass
    return _short(text)


def _short(value: Any) -> Any:
    v = jsonable(value)
    return v[:40] + "…" if isinstance(v, str) and len(v) > 40 else v


def _round(value: Any) -> Any:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f):
        return None
    return float(f"{f:.6g}")


INTEGER_TYPES = (
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "UHUGEINT",
)
NUMERIC_TYPES = (*INTEGER_TYPES, "FLOAT", "DOUBLE", "REAL")


def is_numeric(ctype: str) -> bool:
    """True for DuckDB's integer, floating-point and DECIMAL types."""
    return ctype.upper() in NUMERIC_TYPES or _DECIMAL_TYPE.fullmatch(ctype.upper()) is not None
