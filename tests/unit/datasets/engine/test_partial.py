"""app/datasets/engine/partial.py (and its use by query.execute_to_store): a query that runs out of time
keeps the rows it streamed, marked partial; one that produced none fails with 5003 saying so."""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
import pytest

from app.core.errors import Timeout
from app.datasets.engine import databases, query
from app.datasets.engine.partial import held_partial, reserve_s, uncounted
from tests.support.datasets import small_engine_config

# Rows that come steadily (each hashes about 1 KB): far more than the time limit lets the whole query make.
STREAMING = "SELECT i, md5(repeat(i::VARCHAR, 200)) AS h FROM range(100000000) t(i)"
# One row, at the end of a long aggregate: nothing comes before it.
AT_THE_END = "SELECT sum(a.range * b.range) AS s FROM range(100000) a, range(100000) b"


@pytest.fixture
def cfg(tmp_path: Path) -> databases.EngineConfig:
    return small_engine_config(tmp_path, memory_limit="512MB", timeout_s=3.0)


def test_the_reserve_is_a_quarter_within_bounds() -> None:
    assert reserve_s(2.0) == 0.5 and reserve_s(0.3) == 0.1 and reserve_s(60.0) == 3.0
    assert reserve_s(0.1) == 0.05  # never more than half of what is left


def test_streamed_rows_are_held_with_their_types() -> None:
    con = duckdb.connect()
    sql = "SELECT range AS n, range::VARCHAR AS n, DATE '2025-01-01' + range::INTEGER AS d FROM range(5000)"
    rows, reason = held_partial(con, sql, "temp.main.held", 100, time.monotonic() + 2)
    assert rows == 100 and "first 100 rows" in reason and "Raise timeout_ms" in reason
    described = con.execute("DESCRIBE temp.main.held").fetchall()
    assert [(r[0], r[1]) for r in described] == [("n", "BIGINT"), ("n_1", "VARCHAR"), ("d", "DATE")]
    assert con.execute("SELECT count(*), min(n), max(n_1::INT) FROM temp.main.held").fetchone() == (100, 0, 99)


@pytest.mark.slow  # each runs to its 3 s time limit
def test_a_query_out_of_time_answers_the_rows_it_produced(cfg: databases.EngineConfig) -> None:
    started = time.monotonic()
    res = query.execute_to_store(cfg, STREAMING, [], {}, cfg.results / "q_partial.parquet", 1_000_000, 5)
    assert time.monotonic() - started < cfg.timeout_s + 1.0
    assert res.extra["partial"].startswith("The query ran out of its time limit")
    assert 0 < res.rows_stored == res.rows_total <= 10_000 and res.path.is_file()
    assert [r["i"] for r in res.head] == list(range(len(res.head))) and len(res.head) == 5
    with duckdb.connect() as con:
        assert con.execute(f"SELECT count(*) FROM read_parquet('{res.path}')").fetchone() == (res.rows_stored,)


@pytest.mark.slow  # each runs to its 3 s time limit
def test_a_query_with_no_row_before_its_limit_says_so(cfg: databases.EngineConfig) -> None:
    with pytest.raises(Timeout) as failed:
        query.execute_to_store(cfg, AT_THE_END, [], {}, cfg.results / "q_none.parquet", 1000, 5)
    assert failed.value.code == 5003 and "before it produced any row: no partial result" in failed.value.message
    assert any("ORDER BY, GROUP BY" in s for s in failed.value.suggestions)
    assert not (cfg.results / "q_none.parquet").exists()


@pytest.mark.slow  # each runs to its 3 s time limit
def test_a_result_whose_count_runs_out_of_time_is_partial(cfg: databases.EngineConfig) -> None:
    """The stored rows are whole (the first max_rows); counting the rest did not end in time."""
    sql = "SELECT a.range AS x, b.range AS y FROM range(100000) a, range(100000) b WHERE (a.range + b.range) % 7 <> 3"
    res = query.execute_to_store(cfg, sql, [], {}, cfg.results / "q_uncounted.parquet", 1000, 5)
    assert res.rows_stored == res.rows_total == 1000 and res.extra["partial"] == uncounted(1000)
    fast = query.execute_to_store(cfg, "SELECT * FROM range(2000)", [], {}, cfg.results / "q_fast.parquet", 1000)
    assert fast.rows_total == 2000 and fast.extra == {}
