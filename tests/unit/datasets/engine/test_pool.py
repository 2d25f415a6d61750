"""app/datasets/engine/pool.py: the time limit holds even inside one scalar function, a worker that dies
or outgrows its memory is replaced, long calls give way to short ones, and one key cannot take every
engine slot."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.core.embeddings import cpus
from app.core.embeddings.load import LOAD
from app.core.errors import CairnError, MemoryLimit, SchemaError, Timeout, Unavailable
from app.datasets.engine import databases, priority, process, sources
from app.datasets.engine.pool import GRACE_S, MB, SPARE, WORKER_HEADROOM, WorkerPool, memory_bytes
from app.datasets.engine.query import StoredResult, execute_to_store, read_rows
from tests.support.datasets import small_engine_config
from tests.support.engine import gone, until

# One call of a scalar function on two long texts: ~15 s of CPU that no interrupt can stop.
UNINTERRUPTIBLE = "SELECT levenshtein(repeat('a', 100000), repeat('b', 100000)) AS d"


# A join DuckDB interrupts between vectors.
INTERRUPTIBLE = "SELECT count(*) AS n FROM range(100000) a, range(100000) b WHERE hash(a.range + b.range) = 0"


# Rows written to the result as they come, for as long as the call lasts.
ENDLESS = "SELECT i, md5(i::VARCHAR) AS h FROM range(1000000000) t(i)"


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


def with_timeout(cfg: databases.EngineConfig, seconds: float) -> databases.EngineConfig:
    return databases.EngineConfig(**{**cfg.__dict__, "timeout_s": seconds})


async def run_query(
    pool: WorkerPool, cfg: databases.EngineConfig, sql: str, caller: str = "k", name: str = "q_1", max_rows: int = 1000
) -> StoredResult:
    """`execute_to_store` of `sql` in a worker of `pool`."""
    args: tuple[Any, ...] = (sql, [], {}, cfg.results / f"{name}.parquet", max_rows, 10)
    result: StoredResult = await pool.run(caller, execute_to_store, cfg, args, {})
    return result


@pytest.mark.slow  # worker processes
async def test_an_uninterruptible_function_is_killed_at_its_time_limit(
    pool: WorkerPool, cfg: databases.EngineConfig
) -> None:
    before = sorted(pool.pids())
    started = time.monotonic()
    with pytest.raises(Timeout) as stopped:
        await run_query(pool, cfg, UNINTERRUPTIBLE)
    took = time.monotonic() - started
    assert stopped.value.code == 5003
    # Well short of the ~15 s the function needs; the margin covers killing and reaping on a loaded host.
    assert took < cfg.timeout_s + GRACE_S + 5.0, took
    after = sorted(pool.pids())
    assert len(after) == pool.size + SPARE and len(set(before) & set(after)) == len(after) - 1
    assert pool.replaced == 1
    assert gone(sorted(set(before) - set(after)))
    assert (await run_query(pool, cfg, "SELECT 43 AS n", name="q_2")).head == [{"n": 43}]
    assert os.listdir(cfg.results) == ["q_2.parquet"]


@pytest.mark.slow  # worker processes
async def test_an_interrupted_statement_keeps_its_worker(pool: WorkerPool, cfg: databases.EngineConfig) -> None:
    before = sorted(pool.pids())
    with pytest.raises(Timeout):
        await run_query(pool, with_timeout(cfg, 0.3), INTERRUPTIBLE)
    assert sorted(pool.pids()) == before and pool.replaced == 0


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every `process.set_nice(pid, nice)` made meanwhile, in order (each still takes effect)."""
    made: list[tuple[int, int]] = []
    real = priority.set_nice

    def spy(pid: int, nice: int) -> bool:
        made.append((pid, nice))
        return real(pid, nice)

    monkeypatch.setattr(process, "set_nice", spy)
    return made


def thread_nices(pid: int) -> set[int]:
    """The niceness of each thread of process `pid`."""
    return {os.getpriority(os.PRIO_PROCESS, int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


def thread_policies(pid: int) -> set[int]:
    """The scheduling policy of each thread of process `pid`."""
    return {os.sched_getscheduler(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


def thread_cpus(pid: int) -> set[frozenset[int] | None]:
    """The CPUs of each thread of process `pid`."""
    return {cpus.cpus_of(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


@pytest.mark.slow  # worker processes
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux's")
async def test_a_long_call_yields_the_cpu_and_its_worker_is_put_back(
    cfg: databases.EngineConfig, calls: list[tuple[int, int]]
) -> None:
    made = WorkerPool(1, 1, memory_bytes(0, "512MB"), demote=(1.0, 15, True))
    try:
        assert (await run_query(made, cfg, "SELECT 1 AS n")).head == [{"n": 1}]
        assert calls == []  # a short call keeps its priority
        task = asyncio.create_task(run_query(made, with_timeout(cfg, 4.0), INTERRUPTIBLE, name="q_2"))
        await until(lambda: bool(made.busy_pids()))
        [busy] = made.busy_pids()
        # Every thread of the worker, DuckDB's included, and under SCHED_IDLE too where that can be undone
        # (a call's thread that wakes up takes the CPU at once).
        idle = os.SCHED_IDLE if made.may_raise else os.SCHED_OTHER
        await until(lambda: thread_nices(busy) == {15} and thread_policies(busy) == {idle}, what="lowered")
        assert thread_cpus(busy) == {cpus.all_cpus()}  # alone on the host: every core
        # While the process answers other calls (as the executor counts them), it keeps off one core.
        LOAD.call_started()
        LOAD.call_started()
        try:
            confined = {cpus.background_cpus() or cpus.all_cpus()}
            await until(lambda: thread_cpus(busy) == confined, what="kept off one core")
        finally:
            LOAD.call_finished()
            LOAD.call_finished()
        await until(lambda: thread_cpus(busy) == {cpus.all_cpus()}, what="every core again")
        assert not task.done()
        with pytest.raises(Timeout):
            await task
        assert calls == [(busy, 15), (busy, 0)]
        # Put back where this process may raise a priority (CAP_SYS_NICE), else replaced by a fresh one.
        may_raise = os.geteuid() == 0
        assert (busy in made.pids()) == may_raise and made.replaced == (0 if may_raise else 1)
        assert all(thread_nices(pid) == {0} for pid in made.pids())
        assert all(thread_policies(pid) == {os.SCHED_OTHER} for pid in made.pids())
        assert all(thread_cpus(pid) == {cpus.all_cpus()} for pid in made.pids())
    finally:
        made.close()


@pytest.mark.slow  # worker processes
@pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0, reason="sets this process's niceness")
async def test_a_server_started_with_a_niceness_keeps_it_for_its_workers(cfg: databases.EngineConfig) -> None:
    os.setpriority(os.PRIO_PROCESS, 0, 3)  # as `nice -n 3 cairn serve`: the threads started from here inherit it
    try:
        made = WorkerPool(1, 1, memory_bytes(0, "512MB"), demote=(0.1, 10, False))
        try:
            task = asyncio.create_task(run_query(made, with_timeout(cfg, 5.0), INTERRUPTIBLE))
            await until(lambda: bool(made.busy_pids()))
            [busy] = made.busy_pids()
            await until(lambda: thread_nices(busy) == {13}, what="lowered by 10 from where it started")
            LOAD.call_started()
            LOAD.call_started()
            try:
                await asyncio.sleep(0.2)  # a few looks at the worker: none confines it
                assert thread_cpus(busy) == {cpus.all_cpus()}  # never confined without `confine`
            finally:
                LOAD.call_finished()
                LOAD.call_finished()
            with pytest.raises(Timeout):
                await task
            assert busy in made.pids() and made.replaced == 0
            assert all(thread_nices(pid) == {3} for pid in made.pids())  # back where it started, not to 0
        finally:
            made.close()
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, 0)


@pytest.mark.slow  # worker processes
async def test_a_worker_whose_priority_cannot_be_raised_again_is_replaced(
    cfg: databases.EngineConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = WorkerPool(1, 1, memory_bytes(0, "512MB"), demote=(0.05, 10, False))
    real = priority.set_nice
    monkeypatch.setattr(process, "set_nice", lambda pid, nice: nice > 0 and real(pid, nice))
    try:
        before = made.pids()
        with pytest.raises(Timeout):
            await run_query(made, with_timeout(cfg, 0.3), INTERRUPTIBLE)
        assert made.replaced == 1
        demoted = set(before) - set(made.pids())
        assert len(demoted) == 1 and gone(sorted(demoted))
        assert (await run_query(made, cfg, "SELECT 43 AS n", name="q_2")).head == [{"n": 43}]
        assert all(thread_nices(pid) == {0} for pid in made.pids())
    finally:
        made.close()


# Lowering ahead of time is only done where a priority can be raised again (CAP_SYS_NICE, RLIMIT_NICE).
ahead_of_time = pytest.mark.skipif(
    not priority.may_raise(os.getpriority(os.PRIO_PROCESS, 0)), reason="lowers priorities it could not raise again"
)


@pytest.mark.slow  # worker processes
@ahead_of_time
async def test_a_key_whose_call_ran_long_starts_its_next_calls_lowered(
    cfg: databases.EngineConfig, calls: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A call is long past a second: the short ones below stay short even on a busy host.
    made = WorkerPool(2, 1, memory_bytes(0, "512MB"), demote=(1.0, 10, False))
    try:
        with pytest.raises(Timeout):
            await run_query(made, with_timeout(cfg, 2.0), INTERRUPTIBLE, caller="heavy")
        assert [n for _, n in calls] == [10, 0]  # lowered once it ran long, put back at its end
        calls.clear()
        assert (await run_query(made, cfg, "SELECT 1 AS n", caller="heavy", name="q_2")).head == [{"n": 1}]
        [(pid, _), _] = calls
        assert calls == [(pid, 10), (pid, 0)]  # a short call of the same key: lowered from its start
        calls.clear()
        assert (await run_query(made, cfg, "SELECT 2 AS n", caller="light", name="q_3")).head == [{"n": 2}]
        assert calls == []  # another key's call keeps the worker's priority
        monkeypatch.setattr(priority, "LOWERED_FOR_S", 0.0)  # the heavy key's long call is now long ago
        assert (await run_query(made, cfg, "SELECT 3 AS n", caller="heavy", name="q_4")).head == [{"n": 3}]
        assert calls == []
        assert all(thread_nices(pid) == {0} for pid in made.pids())
    finally:
        made.close()


@pytest.mark.slow  # worker processes
@ahead_of_time
async def test_the_replacement_of_a_worker_killed_during_a_call_starts_lowered(
    cfg: databases.EngineConfig, calls: list[tuple[int, int]]
) -> None:
    made = WorkerPool(1, 1, memory_bytes(0, "512MB"), demote=(1.0, 10, False))
    try:
        before = set(made.pids())
        with pytest.raises(Timeout):  # a limit the request surely reaches the worker within, even on a busy host
            await run_query(made, with_timeout(cfg, 2.0), UNINTERRUPTIBLE, caller="heavy")
        [fresh] = set(made.pids()) - before
        [replacement] = [w for w in made._idle if w.pid == fresh]
        replacement.wait_ready(60)
        assert thread_nices(fresh) == {10}  # it started lowered: its start-up is the heavy key's cost
        assert thread_policies(fresh) == {os.SCHED_IDLE}
        calls.clear()
        # The next call takes the latest worker to have come back, the replacement; another key's call
        # runs at the worker's own priority.
        assert (await run_query(made, cfg, "SELECT 2 AS n", caller="light", name="q_2")).head == [{"n": 2}]
        assert calls == [(fresh, 0)]
        assert all(thread_nices(pid) == {0} for pid in made.pids())
        assert all(thread_policies(pid) == {os.SCHED_OTHER} for pid in made.pids())
    finally:
        made.close()


@pytest.mark.slow  # worker processes
async def test_a_worker_killed_while_idle_is_replaced_before_the_next_call(
    pool: WorkerPool, cfg: databases.EngineConfig
) -> None:
    await run_query(pool, cfg, "SELECT 1 AS n")
    victims = pool.pids()
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    assert gone(victims)
    # No error (a dead worker never saw the call); two keys at once use both (replaced) workers.
    answers = await asyncio.gather(*(run_query(pool, cfg, "SELECT 2 AS n", key, f"q_{key}") for key in "ab"))
    assert [a.head for a in answers] == [[{"n": 2}]] * 2
    # The spare, dead too, was replaced as well (before it could be handed a call).
    assert not set(victims) & set(pool.pids()) and pool.replaced == len(victims) == pool.size + SPARE


@pytest.mark.slow  # worker processes
async def test_a_worker_killed_mid_call_gives_a_clean_error_and_leaves_nothing(
    pool: WorkerPool, cfg: databases.EngineConfig
) -> None:
    await run_query(pool, cfg, "SELECT 1 AS n", name="q_0")  # started workers: the kill lands mid-call, not mid-boot
    long = with_timeout(cfg, 60)
    call = asyncio.create_task(run_query(pool, long, ENDLESS, max_rows=10**9))
    deadline = time.monotonic() + 20
    while not pool.busy_pids():
        assert time.monotonic() < deadline and not call.done()
        await asyncio.sleep(0.02)
    [busy] = pool.busy_pids()
    await asyncio.sleep(0.5)  # the query is running, its rows held in its temporary table
    assert not call.done()
    # What a worker killed while it wrote the result's file leaves (the file is named for its process).
    (cfg.results / f"q_x.{busy}.tmp").write_bytes(b"PAR1")
    os.kill(busy, signal.SIGKILL)
    with pytest.raises(Unavailable) as died:
        await asyncio.wait_for(call, 10)
    body = died.value.body()["error"]
    assert body["code"] == 5030 and "SIGKILL" in body["message"] and body["suggestions"]
    # The half-written result is gone, and no result appeared (only the warm-up's).
    assert [p.name for p in cfg.results.iterdir()] == ["q_0.parquet"]
    assert not (cfg.work / "tmp" / f"w{busy}").exists()
    assert (await run_query(pool, cfg, "SELECT 3 AS n", name="q_2")).head == [{"n": 3}]


@pytest.mark.slow  # worker processes
async def test_errors_keep_their_class_message_and_suggestions(pool: WorkerPool, cfg: databases.EngineConfig) -> None:
    path = cfg.roots[0] / "a.csv"
    src = sources.make_source("a", str(path), [path])
    args: tuple[Any, ...] = ("SELECT xx FROM a", [src], {}, cfg.results / "q_1.parquet", 1000, 10)
    with pytest.raises(SchemaError) as bad:
        await pool.run("k", execute_to_store, cfg, args, {})
    assert bad.value.code == 4003 and "Did you mean 'x'" in bad.value.message and bad.value.suggestions
    assert pool.replaced == 0  # an error about the statement keeps the worker


@pytest.mark.slow  # worker processes
async def test_a_worker_out_of_memory_answers_5002_and_is_replaced(cfg: databases.EngineConfig) -> None:
    small = WorkerPool(1, 1, 400 * 1024 * 1024)  # DuckDB's own limit (4 GB) is not what stops it
    try:
        big = databases.EngineConfig(**{**cfg.__dict__, "memory_limit": "4GB", "timeout_s": 30.0})
        with pytest.raises(MemoryLimit) as full:
            await run_query(small, big, "SELECT length(string_agg(repeat('x', 1000000), '')) AS n FROM range(600)")
        assert full.value.code == 5002 and small.replaced == 1
        assert (await run_query(small, big, "SELECT 4 AS n", name="q_2")).head == [{"n": 4}]
    finally:
        small.close()


@pytest.mark.slow  # worker processes
async def test_a_call_in_a_thread_uses_the_same_slots(pool: WorkerPool, cfg: databases.EngineConfig) -> None:
    stored = await run_query(pool, cfg, "SELECT range AS n FROM range(5)")
    rows = await asyncio.to_thread(pool.run_sync, "k", read_rows, cfg, (stored.path, 1, 2), {})
    assert rows == [{"n": 1}, {"n": 2}]


@pytest.mark.slow  # worker processes
async def test_one_key_cannot_hold_up_another(pool: WorkerPool, cfg: databases.EngineConfig) -> None:
    slow = with_timeout(cfg, 5.0)
    hostile = [asyncio.create_task(run_query(pool, slow, UNINTERRUPTIBLE, "hostile", f"q_h{i}")) for i in range(2)]
    # One hostile call runs, the other waits for the hostile key's only slot.
    await until(lambda: pool.slots.held("hostile") == 1 and pool.slots.waiting() == 1)
    answer = await run_query(pool, cfg, "SELECT 43 AS n", "other", "q_o")
    assert answer.head == [{"n": 43}] and not any(task.done() for task in hostile)  # it went first
    for task in hostile:
        with pytest.raises(Timeout):
            await task


@pytest.mark.slow  # worker processes
async def test_another_callers_short_call_takes_a_burst_slot_while_long_calls_hold_the_others(
    cfg: databases.EngineConfig,
) -> None:
    made = WorkerPool(1, 1, memory_bytes(0, "512MB"), demote=(0.05, 10, False), burst=1)
    try:
        assert len(made.pids()) == 1 + 1 + SPARE  # a worker per slot, burst ones included, and a spare
        slow = with_timeout(cfg, 3.0)
        heavy = [asyncio.create_task(run_query(made, slow, INTERRUPTIBLE, "heavy", f"q_h{i}")) for i in range(2)]
        # The only regular slot is the heavy caller's; its second call waits (it holds one: no burst).
        await until(lambda: made.slots.held("heavy") == 1 and made.slots.waiting() == 1)
        answer = await run_query(made, cfg, "SELECT 43 AS n", "light", "q_l")
        assert answer.head == [{"n": 43}] and not any(task.done() for task in heavy)  # in a burst slot, at once
        for task in heavy:
            with pytest.raises(Timeout):
                await task
        # The heavy caller's calls ran long: for a while it takes no burst slot even when it holds none.
        assert made._long.heavy("heavy")
        assert made.slots.bursting() == made.slots.waiting() == 0
    finally:
        made.close()


@pytest.mark.slow  # worker processes
async def test_closing_the_pool_stops_its_workers(cfg: databases.EngineConfig) -> None:
    made = WorkerPool(2, 1, 0)
    await run_query(made, cfg, "SELECT 1 AS n")
    pids = made.pids()
    made.close()
    assert gone(pids)


def test_memory_caps_follow_the_duckdb_limit() -> None:
    mb = MB
    assert memory_bytes(0, "2GB") == 2048 * mb + WORKER_HEADROOM
    assert memory_bytes(0, "512 MiB") == 512 * mb + WORKER_HEADROOM
    assert memory_bytes(0, "80%") == 4096 * mb
    assert memory_bytes(700, "2GB") == 700 * mb


@pytest.mark.slow  # worker processes
async def test_an_unexpected_error_is_raised_as_it_was_and_the_worker_replaced(
    pool: WorkerPool, cfg: databases.EngineConfig
) -> None:
    with pytest.raises(TypeError):
        await pool.run("k", read_rows, cfg, (), {})  # not a statement error: a bug
    assert pool.replaced == 1
    with pytest.raises(CairnError) as outside:
        await pool.run("k", read_rows, cfg, (cfg.work / "elsewhere.parquet", 0, 1), {})
    assert outside.value.code == 4002 and pool.replaced == 1


@pytest.mark.slow  # worker processes
async def test_a_call_from_the_event_loop_takes_no_thread(
    pool: WorkerPool, cfg: databases.EngineConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    await run_query(pool, cfg, "SELECT 1 AS n")  # a worker has greeted
    handed: list[Any] = []
    submit = pool._threads.submit

    def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        handed.append(fn)
        return submit(fn, *args, **kwargs)

    monkeypatch.setattr(pool._threads, "submit", counted)
    monkeypatch.setattr(process, "READ_CHUNK", 7)  # each reply is read in many pieces
    wide = "SELECT {i} AS n, repeat('x', 3000) AS t"
    answers = [await run_query(pool, cfg, wide.format(i=i), name=f"q_{i}") for i in range(3)]
    assert [(a.head or [{}])[0].get("n") for a in answers] == [0, 1, 2]
    # An early answer (all rows in it), then the final one once the file is written.
    args: tuple[Any, ...] = ("SELECT 7 AS n", [], {}, cfg.results / "q_e.parquet", 1000, 10)
    early, final = await pool.run_staged("k", execute_to_store, cfg, args, {})
    assert early.head == [{"n": 7}] and final is not None and (await final).path.is_file()
    assert handed == []
    # A worker that died while idle never saw the request: the call goes to a thread and is answered.
    for pid in pool.pids():
        os.kill(pid, signal.SIGKILL)
    assert gone(pool.pids())
    assert (await run_query(pool, cfg, "SELECT 2 AS n", name="q_d")).head == [{"n": 2}]
    assert handed


@pytest.mark.slow  # worker processes
async def test_a_conversation_cancelled_mid_call_never_hands_its_worker_the_next_call(
    pool: WorkerPool, cfg: databases.EngineConfig
) -> None:
    await run_query(pool, cfg, "SELECT 1 AS n")  # a worker has greeted
    args: tuple[Any, ...] = (INTERRUPTIBLE, [], {}, cfg.results / "q_c.parquet", 1000, 10)
    done = await pool._start("k", execute_to_store, cfg, args, {}, None)
    [worker] = pool._busy
    sent_before = worker._since  # the previous call's
    await until(lambda: worker._since > sent_before, what="the request sent")
    busy = worker.pid
    done.cancel()  # as when the event loop is torn down
    with contextlib.suppress(asyncio.CancelledError):
        await done
    assert gone([busy])  # it may still have been answering: killed, not handed another call
    assert (await run_query(pool, cfg, "SELECT 3 AS n", name="q_n")).head == [{"n": 3}]
