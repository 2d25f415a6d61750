"""What a query's result would be, found without storing it (context_optimizer): its columns and types
(bound, not run), its first rows rendered as answers render them and its row count, each of these two
under a short time limit of its own; past it, the row count is the planner's estimate (EXPLAIN) and the
rows are left out. Runs in a DuckDB worker process (see `databases`)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from app.datasets.engine.databases import EngineConfig, run_locked
from app.datasets.engine.rendering import capped_query, fetch_capped
from app.datasets.engine.sources import Source
from app.datasets.engine.watchdog import TimedOut, run_with_timeout, time_left

T = TypeVar("T")

STEP_S = 1.5  # time limit of the sample, and of the count, of one estimate


@dataclass
class Estimate:
    """A query's result as far as the estimate found it: `rows` is None when neither counted nor
    planned; `head` is None when its rows could not be read in time."""

    columns: list[str]
    types: list[str]
    rows: int | None
    rows_exact: bool
    head: list[dict[str, Any]] | None


def estimate_query(
    cfg: EngineConfig,
    sql: str,
    sources: list[Source],
    result_views: dict[str, Path],
    head: int,
    step_s: float = STEP_S,
) -> Estimate:
    """Estimate the checked statement `sql` over `sources`: its first `head` rows and its row count.
    A statement other than a SELECT (DESCRIBE, SUMMARIZE, EXPLAIN) is run: its result is small."""

    def work(con: duckdb.DuckDBPyConnection) -> Estimate:
        if not _is_select(sql):
            return _run_whole(con, sql, head, step_s)
        query, names = capped_query(con, f"({sql})")
        rel = con.sql(f"SELECT * FROM ({sql})")
        types = [str(t) for t in rel.types] if rel is not None else []
        rows = _within(con, step_s, lambda: fetch_capped(con.execute(f"{query} LIMIT {int(head)}"), names, head))
        counted = _within(con, step_s, lambda: _count(con, sql))
        if counted is not None:
            return Estimate(names, types, counted, True, rows)
        return Estimate(names, types, planned_rows(con, sql), False, rows)

    return run_locked(cfg, sources, work, result_views=result_views)


def _within(con: duckdb.DuckDBPyConnection, seconds: float, fn: Callable[[], T]) -> T | None:
    """`fn()`, or None when it ran past `seconds` (or past what is left of the call's time)."""
    try:
        value, _ = run_with_timeout(con, time_left(seconds), fn)
    except TimedOut:
        return None
    return value


def _count(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    row = con.execute(f"SELECT count(*) FROM (\n{sql}\n)").fetchone()
    return int(row[0]) if row else 0


def _run_whole(con: duckdb.DuckDBPyConnection, sql: str, head: int, step_s: float) -> Estimate:
    """A statement that is not a SELECT, run under the step's limit: its rows counted as they come."""

    def run() -> tuple[list[str], list[str], list[dict[str, Any]], int]:
        cur = con.execute(sql)
        names = [str(d[0]) for d in cur.description or []]
        types = [str(d[1]) for d in cur.description or []]
        rows = fetch_capped(cur, names, head)
        return names, types, rows, len(rows) + len(cur.fetchall())

    got = _within(con, step_s, run)
    if got is None:
        return Estimate([], [], None, False, None)
    names, types, rows, total = got
    return Estimate(names, types, total, True, rows)


def planned_rows(con: duckdb.DuckDBPyConnection, sql: str) -> int | None:
    """The planner's estimate of the rows `sql` (a SELECT) returns, from its EXPLAIN plan (see
    `_planned`)."""
    try:
        row = con.execute(f"EXPLAIN (FORMAT JSON) {sql}").fetchone()
        plan = json.loads(str(row[1])) if row else []
    except (duckdb.Error, ValueError):
        return None
    return _planned(plan[0]) if isinstance(plan, list) and plan and isinstance(plan[0], dict) else None


def _planned(node: dict[str, Any]) -> int | None:
    """A plan node's estimated rows: its own estimate, else its inputs' (multiplied for a cross
    product, the largest for another operator), a LIMIT's at most its limit (DuckDB plans a LIMIT's
    own cardinality as 0)."""
    extra = node.get("extra_info")
    info: dict[str, Any] = extra if isinstance(extra, dict) else {}
    inputs = [_planned(c) for c in node.get("children") or [] if isinstance(c, dict)]
    known = [n for n in inputs if n is not None]
    name = str(node.get("name", ""))
    if name.endswith("LIMIT"):
        cap = _number(info.get("Limit"))
        return min([n for n in (cap, *known) if n is not None], default=None)
    own = _number(info.get("Estimated Cardinality"))
    if own is not None:
        return own
    if not known:
        return None
    return math.prod(known) if "CROSS_PRODUCT" in name else max(known)


def _number(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(str(value).replace(",", ""))
    except ValueError:
        return None


def _is_select(sql: str) -> bool:
    """True when `sql` (one checked statement) is a SELECT, which can be nested in another statement."""
    try:
        return duckdb.extract_statements(sql)[0].type.name == "SELECT"
    except (duckdb.Error, IndexError):
        return False
