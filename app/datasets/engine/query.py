"""Queries and their stored results: a checked statement runs once and its result is written to the
result store as Parquet (`execute_to_store`), with its first rows rendered for the answer; pages
(`read_rows`) and per-column summaries (`summarize_stored`, `summary_query`) of a stored result. These
functions run in a DuckDB worker process (see `databases`)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
from duckdb.sqltypes import DuckDBPyType

from app.core.errors import NotFound, QueryError
from app.datasets.engine.databases import EngineConfig, run_locked
from app.datasets.engine.ipc import answer_early
from app.datasets.engine.partial import COUNT_MARGIN_S, PARTIAL_MAX_ROWS, held_partial, reserve_s, uncounted
from app.datasets.engine.rendering import capped_query, capped_select, fetch_capped, iso_text
from app.datasets.engine.sandbox import ident, inside
from app.datasets.engine.sandbox import sql_string as lit
from app.datasets.engine.sources import Source
from app.datasets.engine.values import CELL_CHARS, extreme, is_numeric, rounded
from app.datasets.engine.watchdog import TimedOut, run_with_timeout, time_left


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
    (`pool.offload_staged`), it is answered before the file is written, and the final answer (the same
    value) once the file is in place.

    A SELECT runs once, into a temporary table of the call's connection (DuckDB spills it past its
    memory limit); its types, the Parquet file and the head are read from that table. Writing the file
    straight from the query and reading the head back from it would bind the query three times more
    and the file once more, most of the cost of a small query."""
    started = time.perf_counter()
    store = _store_select if _is_select(sql) else _store_explain

    def work(con: duckdb.DuckDBPyConnection) -> StoredResult:
        # Named for this process: the server removes what a worker killed mid-write left (process.scrub).
        tmp = dest.with_name(f"{dest.stem}.{os.getpid()}.tmp")
        return store(con, _Job(sql, tmp, dest, max_rows, head, started, time.monotonic() + time_left(cfg.timeout_s)))

    result = run_locked(cfg, sources, work, result_views=result_views)
    if not result.elapsed_ms:
        result.elapsed_ms = _ms(started)
    return result


@dataclass(frozen=True)
class _Job:
    """One `execute_to_store` call: the statement, the file written (`tmp`, renamed to `dest` once
    whole), and the rows kept and answered."""

    sql: str
    tmp: Path
    dest: Path
    max_rows: int
    head: int
    started: float
    deadline: float = 0.0  # when the call's time limit ends (time.monotonic); 0: none

    def left(self) -> float:
        """Seconds left of the call's time limit (at least a millisecond)."""
        return max(0.001, self.deadline - time.monotonic())


def _store_select(con: duckdb.DuckDBPyConnection, job: _Job) -> StoredResult:
    """A SELECT held in a temporary table, then written and read from there (see `execute_to_store`).
    A query still running when its time is nearly out is stopped, and the rows it streams in what is
    left are kept instead, marked partial (`partial.held_partial`)."""
    left = job.left() if job.deadline else 0.0
    holding = f"CREATE TEMP TABLE {_HELD} AS SELECT * FROM (\n{job.sql}\n) LIMIT {int(job.max_rows)}"
    cut: str | None = None
    if left > 0:
        try:
            held_rows, _ = run_with_timeout(con, left - reserve_s(left), lambda: con.execute(holding))
            stored = int(held_rows.fetchone()[0])  # type: ignore[index]
        except TimedOut:
            stored, cut = held_partial(con, job.sql, _HELD, min(job.max_rows, PARTIAL_MAX_ROWS), job.deadline)
    else:
        stored = int(con.execute(holding).fetchone()[0])  # type: ignore[index]
    held = f"SELECT * FROM {_HELD}"
    # The held rows' types, from the statement that also reads the head when nothing is cut.
    first = con.execute(f"{held} LIMIT {max(0, int(job.head))}")
    described = first.description or []
    columns = [str(d[0]) for d in described]
    dtypes: list[DuckDBPyType] = [d[1] for d in described]
    kept = _storable(held, columns, dtypes)
    types = [str(t) for t in dtypes]
    rows: list[dict[str, Any]] | None = None
    if kept is None and job.head > 0 and capped_select(held, columns, dtypes) == held:
        rows = fetch_capped(first, columns, job.head)
    con.abort()  # what is left of it
    if cut is not None:
        kept = _write_held(con, held, kept, columns, dtypes, job.tmp)
        rows = rows if rows is not None else (_head(con, kept, held, columns, dtypes, job.head) if job.head > 0 else [])
        job.tmp.replace(job.dest)
        return StoredResult(
            job.dest, columns, types, stored, stored, _ms(job.started), extra={"partial": cut}, head=rows
        )
    if kept is None and 0 < stored <= job.head and stored < job.max_rows:  # the whole result in the answer
        rows = rows if rows is not None else _head(con, kept, held, columns, dtypes, job.head)
        whole = StoredResult(job.dest, columns, types, stored, stored, _ms(job.started), head=rows)
        if len(rows) == stored and answer_early(whole):
            _copy_parquet(con, held, job.tmp)
            job.tmp.replace(job.dest)
            return whole
    kept = _write_held(con, held, kept, columns, dtypes, job.tmp)
    if rows is None:
        rows = _head(con, kept, held, columns, dtypes, job.head) if job.head > 0 else []
    return _stored(con, job, columns, types, stored, rows)


def _write_held(
    con: duckdb.DuckDBPyConnection,
    held: str,
    kept: str | None,
    columns: list[str],
    dtypes: list[DuckDBPyType],
    tmp: Path,
) -> str | None:
    """Write the held rows to `tmp` as `kept` (the storable query, see `_storable`) casts them; the
    storable query it took."""
    try:
        _copy_parquet(con, kept or held, tmp)
    except duckdb.ConversionException:
        if kept is None:
            raise
        # An integer past 38 digits: its column is stored as its exact text instead.
        kept = _storable(held, columns, dtypes, _too_wide(con, held, dtypes))
        _copy_parquet(con, kept or held, tmp)
    return kept


def _store_explain(con: duckdb.DuckDBPyConnection, job: _Job) -> StoredResult:
    """EXPLAIN: not a query a COPY can read; the relation holds its answer."""
    rel = con.sql(job.sql)
    if rel is None:
        raise QueryError("The statement returned no result")
    columns, types = list(rel.columns), [str(t) for t in rel.types]
    rel.limit(job.max_rows).write_parquet(str(job.tmp), compression="zstd")
    stored = int(con.execute(f"SELECT count(*) FROM read_parquet({lit(str(job.tmp))})").fetchone()[0])  # type: ignore[index]
    rows = _page(con, job.tmp, 0, job.head) if job.head > 0 else []
    return _stored(con, job, columns, types, stored, rows)


def _stored(
    con: duckdb.DuckDBPyConnection,
    job: _Job,
    columns: list[str],
    types: list[str],
    stored: int,
    rows: list[dict[str, Any]],
) -> StoredResult:
    """The result whose file `job.tmp` is written, moved into place; its rows counted when the file
    holds only the first `max_rows` (a count that runs out of time leaves the result partial: its
    rows are whole, their total unknown)."""
    total, cut = stored, None
    if stored >= job.max_rows:
        counting = f"SELECT count(*) FROM (\n{job.sql}\n)"
        try:
            left = job.left() - COUNT_MARGIN_S if job.deadline else None
            if left is None:
                total = int(con.execute(counting).fetchone()[0])  # type: ignore[index]
            else:
                row, _ = run_with_timeout(con, max(0.001, left), lambda: con.execute(counting).fetchone())
                total = int(row[0])  # type: ignore[index]
        except TimedOut:
            cut = uncounted(stored)
    job.tmp.replace(job.dest)
    return StoredResult(
        path=job.dest,
        columns=columns,
        types=types,
        rows_stored=stored,
        rows_total=total,
        elapsed_ms=0,
        stored_truncated=total > stored or cut is not None,
        head=rows,
        extra={"partial": cut} if cut else {},
    )


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
    if not inside(path, [cfg.results, *cfg.stored]):
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
    if not inside(path, [cfg.results, *cfg.stored]):
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
            entry["mean"] = rounded(avg)
            entry["std"] = rounded(std)
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
