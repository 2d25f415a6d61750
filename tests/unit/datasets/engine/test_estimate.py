"""app/datasets/engine/estimate.py: a query's columns, first rows and row count found without storing
it; a count past its short limit gives way to the planner's estimate, a sample past it to no rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.datasets.engine import databases, estimate, sources
from tests.support.datasets import small_engine_config

# Far more rows than any machine counts in the tests' step limit; DuckDB plans a range exactly.
HUGE = "SELECT a.range AS x, b.range AS y FROM range(1000000) a, range(1000000) b"


@pytest.fixture
def cfg(tmp_path: Path) -> databases.EngineConfig:
    """A configuration (a.csv: x, y; 3 rows) whose time limit no busy host reaches."""
    return small_engine_config(tmp_path, memory_limit="512MB", timeout_s=60.0)


def test_a_select_is_counted_and_its_first_rows_rendered(cfg: databases.EngineConfig) -> None:
    src = sources.make_source("a", str(cfg.roots[0] / "a.csv"), [cfg.roots[0] / "a.csv"])
    got = estimate.estimate_query(cfg, "SELECT x, y FROM a ORDER BY x", [src], {}, head=2)
    assert (got.columns, got.types) == (["x", "y"], ["BIGINT", "VARCHAR"])
    assert got.rows == 3 and got.rows_exact and got.head == [{"x": 1, "y": "one"}, {"x": 2, "y": "two"}]


def test_a_count_past_its_limit_is_the_planners_estimate(cfg: databases.EngineConfig) -> None:
    got = estimate.estimate_query(cfg, HUGE, [], {}, head=3, step_s=0.3)
    assert not got.rows_exact and got.rows == 10**12
    assert got.head is None or len(got.head) == 3  # a loaded host may not read even those in time


def test_rows_that_take_too_long_to_read_are_left_out(cfg: databases.EngineConfig) -> None:
    got = estimate.estimate_query(cfg, f"SELECT sum(x * y) AS s FROM ({HUGE})", [], {}, head=3, step_s=0.3)
    assert got.head is None and not got.rows_exact and (got.columns, got.types) == (["s"], ["HUGEINT"])


def test_a_statement_other_than_a_select_is_run(cfg: databases.EngineConfig) -> None:
    got = estimate.estimate_query(cfg, "DESCRIBE SELECT 1 AS a, 'x' AS b", [], {}, head=1)
    assert got.rows == 2 and got.rows_exact and got.head is not None and len(got.head) == 1
    assert got.columns[0] == "column_name"


def test_the_plan_of_a_limit_is_at_most_its_limit(cfg: databases.EngineConfig) -> None:
    def planned(sql: str) -> int | None:
        return databases.run_locked(cfg, [], lambda con: estimate.planned_rows(con, sql))

    assert planned("SELECT * FROM range(1000)") == 1000
    assert planned("SELECT * FROM range(1000) LIMIT 7") == 7
    assert planned("SELECT * FROM range(10) a, range(20) b") == 200
    assert planned("SELECT * FROM nowhere") is None
