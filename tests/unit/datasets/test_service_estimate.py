"""app/datasets/service_estimate.py: the reply execute_query would build, measured with the rows in hand
and extrapolated past them, against the budget; stand-in rows when none could be read; the advice."""

from __future__ import annotations

from typing import Any

from app.core import budget
from app.datasets.schemas import QueryIn
from app.datasets.schemas_cache import EstimateIn
from app.datasets.service_answer import Reply, Stored
from app.datasets.service_estimate import Found, _query_args, advice, basis, measure, typical_row

COLUMNS, TYPES = ["id", "name"], ["BIGINT", "VARCHAR"]


def rows(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"customer {i:04d}"} for i in range(n)]


def found(head: list[dict[str, Any]] | None, total: int | None, exact: bool = True) -> Found:
    return Found(COLUMNS, TYPES, total, exact, head, False, "select * from data", ["data"])


def reply_tokens(args: QueryIn, shown: list[dict[str, Any]], total: int) -> int:
    """What execute_query's reply with these rows weighs."""
    meta = {"query_id": "q_0123456789abcdef", "columns": COLUMNS, "types": TYPES, "rows_total": total,
            "rows_stored": total, "elapsed_ms": 0, "engine_reason": "SQL query → duckdb"}  # fmt: skip
    reply = Reply(args, Stored(meta, False, "duckdb", "select * from data", ["data"]))
    return int(budget.finalize(reply(shown, None, "none"))["context_tokens_used"])


def test_rows_in_hand_are_measured_on_the_reply_itself() -> None:
    args = QueryIn(query="SELECT * FROM data", return_limit=10)
    out = measure(found(rows(10), 10), args, 2000)
    # As exact as a reply can be before its query_id (random hex) is drawn.
    assert abs(out.estimated_tokens - reply_tokens(args, rows(10), 10)) <= 3
    assert out.fits and out.rows_within_budget == 10 and out.rows_returned == 10 and out.advice is None
    assert out.basis == "rows counted; 10 rows read" and out.context_tokens_used > 0


def test_more_rows_than_in_hand_are_extrapolated() -> None:
    args = QueryIn(query="SELECT * FROM data", return_limit=1000)
    out = measure(found(rows(100), 5000), args, 2000)
    actual = reply_tokens(args, rows(1000), 5000)
    assert out.rows_returned == 1000 and abs(out.estimated_tokens - actual) <= actual * 0.05
    assert not out.fits and 0 < out.rows_within_budget < 1000
    assert out.advice is not None and f"max_tokens {out.estimated_tokens}" in out.advice
    assert "get_result" in out.advice
    capped = measure(found(rows(100), 5000), args, 2000, cap=5000)
    assert capped.advice is not None and "past the cap of 5000" in capped.advice


def test_csv_rows_cost_less_than_json_ones() -> None:
    json_rows = measure(found(rows(20), 20), QueryIn(query="x", return_limit=20), 2000)
    csv_rows = measure(found(rows(20), 20), QueryIn(query="x", return_limit=20, return_format="csv"), 2000)
    assert csv_rows.tokens_per_row < json_rows.tokens_per_row


def test_without_rows_a_row_of_stand_ins_is_measured() -> None:
    out = measure(found(None, 10**9, exact=False), QueryIn(query="x", return_limit=100), 500)
    assert out.rows_total == 10**9 and not out.rows_exact and out.tokens_per_row > 0
    assert out.basis == "rows: planner estimate; no row read in time: tokens from column types"
    empty = measure(found([], 0), QueryIn(query="x"), 500)
    assert empty.rows_returned == 0 and empty.fits and empty.rows_within_budget == 0


def test_stand_in_values_follow_the_types() -> None:
    row = typical_row(
        ["i", "f", "d", "t", "b", "s"],
        ["INTEGER", "DECIMAL(9,2)", "DATE", "TIMESTAMP WITH TIME ZONE", "BOOLEAN", "VARCHAR"],
    )
    assert row == {"i": 123456, "f": 1234.56, "d": "2025-01-31", "t": "2025-01-31T12:00:00", "b": True,
                   "s": "abcdefghijkl"}  # fmt: skip


def test_basis_and_advice_say_what_they_rest_on() -> None:
    assert basis(Found([], [], 3, True, [], True, "", []), 0) == "cached result: exact"
    assert basis(found(None, None, exact=False), 1).startswith("rows unknown")
    assert advice(100, 200, 10, 10, 20_000) is None
    tail = "aggregate, lower return_limit, or page the rest with get_result"
    assert (
        advice(300, 200, 10, 6, 20_000) == f"6 of 10 rows fit max_tokens 200; max_tokens 300 shows them all; or {tail}"
    )
    assert advice(30_000, 2000, 1000, 60, 20_000) == (
        f"60 of 1000 rows fit max_tokens 2000; all of them need about 30000 tokens, past the cap of 20000: {tail}"
    )


def test_the_estimate_prices_the_execute_query_call_of_its_arguments() -> None:
    args = _query_args(EstimateIn(query="SELECT 1", files=["a.csv"], return_limit=5, max_tokens=300, project="p"))
    assert (args.query, args.files, args.return_limit, args.max_tokens, args.project) == (
        "SELECT 1", ["a.csv"], 5, 300, None
    )  # fmt: skip
