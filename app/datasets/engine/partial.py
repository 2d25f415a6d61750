"""Partial results of a query that runs out of time (the seed: "Query time > 30s: timeout, return
partial").

A SELECT is held in a temporary table in one statement, which keeps nothing when it is interrupted. So
the statement gets the call's time limit less a reserve (`reserve_s`); when it is still running then,
it is stopped and the query runs again as a stream for part of the reserve (`held_partial`): the rows
DuckDB produces in that time (at most `PARTIAL_MAX_ROWS`) are held instead, and the result is marked
partial. A query whose rows come only at its end (ORDER BY, GROUP BY, DISTINCT, an aggregate over
everything) produces none in that time: the call then fails with 5003, saying that no rows came."""

from __future__ import annotations

import time
from typing import Any

import duckdb

from app.core.errors import Timeout
from app.datasets.engine.sandbox import ident
from app.datasets.engine.watchdog import run_with_timeout

# At most this many rows are kept of a partial result (the seed truncates past 10,000 rows).
PARTIAL_MAX_ROWS = 10_000
# The reserve: this share of the time left, within these bounds (seconds).
RESERVE_SHARE = 0.25
RESERVE_MIN_S = 0.1
RESERVE_MAX_S = 3.0
# Of the reserve, the share spent streaming rows; the rest (and the pool's grace) stores them.
STREAM_SHARE = 0.5
_FETCH = 2048
# What counting a result's rows past the stored ones leaves of the time limit, to move the file in place.
COUNT_MARGIN_S = 0.05


def reserve_s(left: float) -> float:
    """The seconds of `left` kept back for a partial result: a quarter, from 0.1 s to 3 s (never more
    than half of `left`)."""
    return min(left / 2, max(RESERVE_MIN_S, min(RESERVE_MAX_S, left * RESERVE_SHARE)))


def held_partial(
    con: duckdb.DuckDBPyConnection, sql: str, table: str, max_rows: int, deadline: float
) -> tuple[int, str]:
    """Stream `sql` for part of the time left before the call's `deadline` (time.monotonic), hold the rows
    it produced in the temporary table `table` and say what they are: (rows held, the reply's
    partial_reason). Raises Timeout (5003) when no row came."""
    started = time.monotonic()
    window = max(0.01, (deadline - started) * STREAM_SHARE)
    described: list[tuple[str, Any]] = []

    def stream() -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = []
        try:
            cur = con.execute(f"SELECT * FROM (\n{sql}\n) LIMIT {int(max_rows)}")
            described.extend((str(d[0]), d[1]) for d in cur.description or [])
            while len(rows) < max_rows:
                chunk = cur.fetchmany(_FETCH)
                if not chunk:
                    break
                rows.extend(chunk)
        except duckdb.InterruptException:
            pass  # the window closed: the rows so far are the partial result
        return rows[:max_rows]

    rows, _ = run_with_timeout(con, window, stream)
    if not rows or not described:
        raise Timeout(
            "The query exceeded its time limit and was stopped before it produced any row: no partial result",
            suggestions=[
                "A query with ORDER BY, GROUP BY, DISTINCT or an aggregate gives its rows only at its end: "
                "filter first (WHERE) or query a smaller part",
                "Raise timeout_ms (up to the server's CAIRN_DATASETS_QUERY_TIMEOUT_MS)",
            ],
        )
    _hold(con, table, described, rows)
    streamed = time.monotonic() - started
    cap = f" (a partial result keeps at most {PARTIAL_MAX_ROWS} rows)" if len(rows) >= PARTIAL_MAX_ROWS else ""
    reason = (
        f"The query ran out of its time limit: these are the first {len(rows)} rows it produced"
        f" in its last {streamed:.1f} s{cap}; the rest were not computed. Raise timeout_ms, or narrow the query "
        "(WHERE, LIMIT) to get all of it."
    )
    return len(rows), reason


def _hold(con: duckdb.DuckDBPyConnection, table: str, described: list[tuple[str, Any]], rows: list[Any]) -> None:
    """Hold `rows` (tuples of the columns `described`: name, type) in the temporary table `table`, each
    column cast back to its type."""
    columns = list(zip(*rows, strict=True))
    params = {f"c{i}": list(values) for i, values in enumerate(columns)}
    unnest = ", ".join(f"unnest($c{i}) AS _c{i}" for i in range(len(described)))
    names: dict[str, int] = {}
    casts = []
    for i, (name, dtype) in enumerate(described):
        seen = names.get(name.lower(), 0)
        names[name.lower()] = seen + 1
        alias = name if not seen else f"{name}_{seen}"  # as DuckDB names a repeated column
        casts.append(f"CAST(_c{i} AS {dtype}) AS {ident(alias)}")
    con.execute(f"CREATE TEMP TABLE {table} AS SELECT {', '.join(casts)} FROM (SELECT {unnest})", params)


def uncounted(stored: int) -> str:
    """The partial_reason of a result whose first `stored` rows are stored whole while counting the
    rest ran out of the time limit."""
    return (
        f"The query has more rows than the {stored} stored (the server's CAIRN_DATASETS_RESULT_MAX_ROWS), "
        "and counting them ran out of its time limit: rows_total counts only the stored rows. Raise "
        "timeout_ms for the exact count, or narrow the query (WHERE, LIMIT)."
    )
