"""Early answers from a DuckDB worker (`ipc.answer_early`, `WorkerPool.run_staged`): a query whose
whole result fits in its answer is answered before its Parquet file is written; the file's write ends
in the final reply, which keeps the worker and the slot until then and carries a failure after the
early answer to its caller. (Readers of such a result wait for its file: tests/unit/datasets/
test_service_results.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.core.errors import QueryError
from app.datasets.engine import databases, query
from app.datasets.engine.pool import WorkerPool, memory_bytes
from tests.support import worker_calls
from tests.support.datasets import small_engine_config


@pytest.fixture
def cfg(tmp_path: Path) -> databases.EngineConfig:
    return small_engine_config(tmp_path, memory_limit="512MB", timeout_s=5.0)


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    made = WorkerPool(1, 1, memory_bytes(0, "512MB"))
    yield made
    made.close()


def store_args(cfg: databases.EngineConfig, sql: str, name: str, head: int) -> tuple[Any, ...]:
    return (sql, [], {}, cfg.results / f"{name}.parquet", 1000, head)


@pytest.mark.slow  # worker processes
async def test_a_result_that_fits_its_answer_is_answered_before_its_file_is_written(
    pool: WorkerPool, cfg: databases.EngineConfig
) -> None:
    sql = "SELECT i AS n, 'x' || i AS label FROM range(3) t(i) ORDER BY i"
    value, later = await pool.run_staged("k", query.execute_to_store, cfg, store_args(cfg, sql, "q_1", 10), {})
    assert later is not None, "three rows of ten shown: answered early"
    assert value.head == [{"n": 0, "label": "x0"}, {"n": 1, "label": "x1"}, {"n": 2, "label": "x2"}]
    assert (value.rows_stored, value.rows_total, value.columns) == (3, 3, ["n", "label"])
    final = await later
    assert final.path == value.path and final.path.is_file()
    assert query.read_rows(cfg, final.path, 0, 10) == value.head  # the file holds what was answered
    assert not list(cfg.results.glob("*.tmp")) and pool.busy_pids() == []


@pytest.mark.slow  # worker processes
async def test_a_result_larger_than_its_answer_is_answered_once_stored(
    pool: WorkerPool, cfg: databases.EngineConfig
) -> None:
    sql = "SELECT i AS n FROM range(50) t(i)"
    value, later = await pool.run_staged("k", query.execute_to_store, cfg, store_args(cfg, sql, "q_2", 10), {})
    assert later is None and value.path.is_file() and len(value.head) == 10 and value.rows_stored == 50
    # A plain `run` is never answered early, whatever the result's size.
    small = await pool.run("k", query.execute_to_store, cfg, store_args(cfg, "SELECT 7 AS n", "q_3", 10), {})
    assert small.path.is_file() and small.head == [{"n": 7}]


def test_a_call_in_the_server_process_is_never_answered_early(cfg: databases.EngineConfig) -> None:
    res = query.execute_to_store(cfg, "SELECT 8 AS n", [], {}, cfg.results / "q_4.parquet", 1000, 10)
    assert res.path.is_file() and res.head == [{"n": 8}]


@pytest.mark.slow  # worker processes
async def test_a_failure_after_the_early_answer_reaches_the_final_future(
    pool: WorkerPool, cfg: databases.EngineConfig
) -> None:
    value, later = await pool.run_staged("k", worker_calls.early_then_fail, cfg, ("early",), {})
    assert value == "early" and later is not None
    with pytest.raises(QueryError, match="failed after answering"):
        await later
    # An error about the statement keeps the worker, and the slot is free again.
    assert pool.replaced == 0
    value, later = await pool.run_staged("k", worker_calls.early_then_value, cfg, ("ab",), {})
    assert value == "ab" and later is not None and await later == "abab"
    # The conversation stays in step: the next call's reply is its own.
    assert (await pool.run("k", query.execute_to_store, cfg, store_args(cfg, "SELECT 9 AS n", "q_5", 10), {})).head == [
        {"n": 9}
    ]
