"""Early answers from a DuckDB worker (`ipc.answer_early`, `WorkerPool.run_staged`): a query whose
whole result fits in its answer is answered before its Parquet file is written; the file's write ends
in the final reply, which keeps the worker and the slot until then and carries a failure after the
early answer to its caller. Readers of such a result wait for its file (`service._settled`)."""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.core.errors import QueryError
from app.datasets import service
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


async def test_a_reader_waits_for_a_file_another_process_is_writing(tmp_path: Path) -> None:
    path = tmp_path / "q_0123456789abcdef.parquet"
    now = datetime.datetime.now(datetime.UTC)
    threading.Timer(0.2, path.write_bytes, args=(b"PAR1",)).start()
    started = time.monotonic()
    await service._settled("q_0123456789abcdef", path, now)
    assert path.is_file() and 0.15 < time.monotonic() - started < 2.0


async def test_a_reader_of_an_old_result_without_its_file_does_not_wait(tmp_path: Path) -> None:
    old = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=service.SETTLE_S + 1)
    started = time.monotonic()
    await service._settled("q_0123456789abcdef", tmp_path / "gone.parquet", old)
    assert time.monotonic() - started < 0.1


async def test_a_reader_in_this_process_waits_for_the_write_it_knows_of(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    later: asyncio.Future[Any] = loop.create_future()
    service._store_later("q_fedcba9876543210", later, ())
    loop.call_later(0.2, later.set_exception, QueryError("disk full"))
    started = time.monotonic()
    # Created long ago: only the write this process knows of is waited for; its failure is the reader's
    # to find (the file is missing).
    old = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    await service._settled("q_fedcba9876543210", tmp_path / "q.parquet", old)
    assert time.monotonic() - started >= 0.15 and "q_fedcba9876543210" not in service._WRITING


def test_a_rest_estimate_has_the_shape_and_about_the_size_of_the_summary(cfg: databases.EngineConfig) -> None:
    from app.core import budget

    sql = (
        "SELECT i AS n, 'city ' || (i % 7) AS city, i * 1.5 AS amount, "
        "CASE WHEN i % 5 = 0 THEN NULL ELSE DATE '2024-01-01' + i::INTEGER END AS day FROM range(60) t(i)"
    )
    res = query.execute_to_store(cfg, sql, [], {}, cfg.results / "q_6.parquet", 1000, 100)
    assert len(res.head) == res.rows_stored == 60
    exact = query.summarize_stored(cfg, res.path, 25)
    guess = service._rest_estimate(res.head, 25, res.columns, res.types)
    assert guess.keys() == exact.keys() and guess["rows"] == exact["rows"] == 35
    assert {c: e.keys() for c, e in guess["columns"].items()} == {c: e.keys() for c, e in exact["columns"].items()}
    assert guess["columns"]["day"]["null_pct"] == exact["columns"]["day"]["null_pct"]
    sizes = budget.tokens_of(guess), budget.tokens_of(exact)
    assert 0.75 < sizes[0] / sizes[1] < 1.33, sizes
