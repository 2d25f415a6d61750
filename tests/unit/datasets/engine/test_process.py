"""app/datasets/engine/process.py: a new worker process opens the databases it is given before it
greets, and its first call reuses them; what a dead worker left is removed."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.datasets.engine import databases, process
from app.datasets.engine.pool import WorkerPool, memory_bytes
from app.datasets.engine.query import StoredResult, execute_to_store
from tests.support.datasets import small_engine_config
from tests.support.engine import gone


@pytest.fixture
def cfg(tmp_path: Path) -> databases.EngineConfig:
    """A small engine configuration: one CSV in its root, a 1 s time limit."""
    return small_engine_config(tmp_path, memory_limit="512MB", timeout_s=1.0)


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    """Two workers; a key holds at most one of them."""
    made = WorkerPool(2, 1, memory_bytes(0, "512MB"))
    yield made
    made.close()


async def run_query(
    pool: WorkerPool, cfg: databases.EngineConfig, sql: str, caller: str = "k", name: str = "q_1", max_rows: int = 1000
) -> StoredResult:
    """`execute_to_store` of `sql` in a worker of `pool`."""
    args: tuple[Any, ...] = (sql, [], {}, cfg.results / f"{name}.parquet", max_rows, 10)
    result: StoredResult = await pool.run(caller, execute_to_store, cfg, args, {})
    return result


@pytest.mark.slow  # worker processes
async def test_a_new_worker_opens_the_latest_calls_databases_before_it_greets(
    pool: WorkerPool, cfg: databases.EngineConfig, tmp_path: Path
) -> None:
    other = small_engine_config(tmp_path / "other", memory_limit="512MB", timeout_s=1.0)  # another lockdown
    await run_query(pool, cfg, "SELECT 1 AS n")
    await run_query(pool, other, "SELECT 1 AS n")
    # The pool remembers both lockdowns; the replacement of a killed worker opens both before it greets.
    [victim, *_] = pool.pids()
    os.kill(victim, signal.SIGKILL)
    assert gone([victim])
    fresh = process.WorkerProcess(0, list(pool._recent.values()))
    cold = process.WorkerProcess(0)
    try:
        await asyncio.to_thread(fresh.wait_ready, 60)
        await asyncio.to_thread(cold.wait_ready, 60)
        assert (fresh.opened, cold.opened) == (2, 0)
        # Its first call reuses the database opened for it.
        args: tuple[Any, ...] = ("SELECT 2 AS n", [], {}, cfg.results / "q_9.parquet", 10, 10)
        reply = await asyncio.to_thread(fresh.call, (execute_to_store, cfg, args, {}, 1.0), 5.0)
        assert reply is not None and reply.unwrap().head == [{"n": 2}] and reply.opened == 2
    finally:
        fresh.end()
        cold.end()
    answers = await asyncio.gather(
        *(run_query(pool, c, "SELECT 3 AS n", k, f"q_{k}") for c, k in ((cfg, "a"), (other, "b")))
    )
    assert [a.head for a in answers] == [[{"n": 3}]] * 2 and victim not in pool.pids()


def test_scrub_removes_what_a_dead_worker_left(tmp_path: Path) -> None:
    work = tmp_path / "work"
    spill = work / "tmp" / "w4242"
    spill.mkdir(parents=True)
    (spill / "duckdb_temp_block").write_bytes(b"x")
    results = work / "results"
    results.mkdir()
    for name in ("q_1.4242.tmp", "q_2.4243.tmp", "q_3.parquet"):
        (results / name).write_bytes(b"x")
    process.scrub(4242, {work, tmp_path / "never-made"})
    assert not spill.exists()
    assert sorted(p.name for p in results.iterdir()) == ["q_2.4243.tmp", "q_3.parquet"]
