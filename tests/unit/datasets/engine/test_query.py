"""app/datasets/engine/query.py: a query's result stored and read back, pages and summaries of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.errors import NotFound
from app.datasets.engine import databases, query, sources
from tests.support.datasets import small_engine_config


@pytest.fixture
def cfg(tmp_path: Path) -> databases.EngineConfig:
    """A small engine configuration: one CSV in its root, a 1 s time limit."""
    return small_engine_config(tmp_path, memory_limit="512MB", timeout_s=1.0)


LONG = "é" * 1000


def stored(cfg: databases.EngineConfig, sql: str) -> Path:
    """`sql`'s result written as a stored result (in this process)."""
    return query.execute_to_store(cfg, sql, [], {}, cfg.results / "q_cut.parquet", 1000).path


def test_a_summary_cuts_the_extremes_of_long_values(cfg: databases.EngineConfig) -> None:
    path = stored(cfg, "SELECT repeat('m', 100000) || range AS t FROM range(3)")
    summary = query.summarize_stored(cfg, path)
    assert summary["rows"] == 3 and summary["columns"]["t"]["min"] == "m" * 40 + "…"


@pytest.fixture
def roomy(tmp_path: Path) -> databases.EngineConfig:
    """A configuration whose time limit no busy host reaches."""
    return small_engine_config(tmp_path / "roomy", memory_limit="512MB", timeout_s=60.0)


def test_a_result_is_stored_with_its_head_and_its_total(roomy: databases.EngineConfig) -> None:
    dest = roomy.results / "q_1.parquet"
    result = query.execute_to_store(roomy, "SELECT range AS n FROM range(25)", [], {}, dest, max_rows=10, head=3)
    assert (result.rows_stored, result.rows_total, result.stored_truncated) == (10, 25, True)
    assert result.columns == ["n"] and result.types == ["BIGINT"]
    assert result.head == [{"n": 0}, {"n": 1}, {"n": 2}] and dest.is_file()
    assert not list(roomy.results.glob("*.tmp"))  # only a whole file is left, under its name
    assert query.read_rows(roomy, dest, 8, 5) == [{"n": 8}, {"n": 9}]


def test_a_view_of_the_inputs_is_queried(roomy: databases.EngineConfig) -> None:
    src = sources.make_source("a", str(roomy.roots[0] / "a.csv"), [roomy.roots[0] / "a.csv"])
    dest = roomy.results / "q_2.parquet"
    result = query.execute_to_store(roomy, "SELECT y FROM a WHERE x > 1", [src], {}, dest, 100, head=10)
    assert result.head == [{"y": "two"}, {"y": "three"}] and result.rows_total == 2
    # A stored result is a view of a later query too.
    again = query.execute_to_store(
        roomy, "SELECT count(*) AS c FROM r", [], {"r": dest}, dest.with_name("q_3.parquet"), 10, 1
    )
    assert again.head == [{"c": 2}]


def test_values_parquet_cannot_hold_are_stored_as_another_type(roomy: databases.EngineConfig) -> None:
    sql = "SELECT 170141183460469231731687303715884105727::HUGEINT AS big, INTERVAL 14 MONTH AS span"
    result = query.execute_to_store(roomy, sql, [], {}, roomy.results / "q_4.parquet", 10, head=1)
    assert result.types == ["HUGEINT", "INTERVAL"]
    assert result.head == [{"big": "170141183460469231731687303715884105727", "span": "1 year 2 months"}]
    assert query.read_rows(roomy, result.path, 0, 1) == result.head


def test_explain_is_stored_as_its_plan(roomy: databases.EngineConfig) -> None:
    result = query.execute_to_store(roomy, "EXPLAIN SELECT 1", [], {}, roomy.results / "q_5.parquet", 10, head=5)
    assert result.rows_stored >= 1 and result.head and "explain_value" in result.columns


def test_a_file_outside_the_result_store_is_gone(roomy: databases.EngineConfig) -> None:
    with pytest.raises(NotFound):
        query.read_rows(roomy, roomy.roots[0] / "a.csv", 0, 1)
    with pytest.raises(NotFound):
        query.summarize_stored(roomy, roomy.work / "elsewhere.parquet")
    with pytest.raises(NotFound):
        query.read_rows(roomy, roomy.results / "expired.parquet", 0, 1)


def test_a_summary_of_numbers(roomy: databases.EngineConfig) -> None:
    result = query.execute_to_store(
        roomy, "SELECT range AS n, NULL::VARCHAR AS t FROM range(4)", [], {}, roomy.results / "q_6.parquet", 10
    )
    summary = query.summarize_stored(roomy, result.path)
    assert summary["rows"] == 4 and summary["from_row"] == 0
    assert summary["columns"]["n"] == {
        "type": "BIGINT",
        "min": 0,
        "max": 3,
        "distinct": 4,
        "null_pct": 0.0,
        "mean": 1.5,
        "std": 1.29099,
    }
    assert summary["columns"]["t"]["null_pct"] == 100.0
    assert query.summarize_stored(roomy, result.path, offset=2)["rows"] == 2
