"""DuckDB worker processes (app/datasets/worker.py): the time limit holds even inside one scalar
function (the worker is killed and replaced), a worker that dies gives its caller a clean error and
leaves no file behind, errors keep their shape across the process boundary, memory is capped per
worker, workers never outlive the server, and one key cannot take every engine slot."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import psutil
import pytest

from app.core import cpus
from app.core.errors import CairnError, MemoryLimit, RateLimited, SchemaError, Timeout, Unavailable
from app.datasets import engine, profiling, worker
from app.datasets.worker import GRACE_S, FairSlots, WorkerPool
from tests.support.datasets import small_engine_config
from tests.support.waiting import eventually

# One call of a scalar function on two long texts: ~15 s of CPU that no interrupt can stop.
UNINTERRUPTIBLE = "SELECT levenshtein(repeat('a', 100000), repeat('b', 100000)) AS d"
# A join DuckDB interrupts between vectors.
INTERRUPTIBLE = "SELECT count(*) AS n FROM range(100000) a, range(100000) b WHERE hash(a.range + b.range) = 0"
# Rows written to the result as they come, for as long as the call lasts.
ENDLESS = "SELECT i, md5(i::VARCHAR) AS h FROM range(1000000000) t(i)"


@pytest.fixture
def cfg(tmp_path: Path) -> engine.EngineConfig:
    """A small engine configuration: one CSV in its root, a 1 s time limit."""
    return small_engine_config(tmp_path, memory_limit="512MB", timeout_s=1.0)


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    """Two workers; a key holds at most one of them."""
    made = WorkerPool(2, 1, worker.memory_bytes(0, "512MB"))
    yield made
    made.close()


def with_timeout(cfg: engine.EngineConfig, seconds: float) -> engine.EngineConfig:
    return engine.EngineConfig(**{**cfg.__dict__, "timeout_s": seconds})


async def query(
    pool: WorkerPool, cfg: engine.EngineConfig, sql: str, caller: str = "k", name: str = "q_1", max_rows: int = 1000
) -> engine.StoredResult:
    """`execute_to_store` of `sql` in a worker of `pool`."""
    args: tuple[Any, ...] = (sql, [], {}, cfg.results / f"{name}.parquet", max_rows, 10)
    result: engine.StoredResult = await pool.run(caller, engine.execute_to_store, cfg, args, {})
    return result


def _cpu_seconds(pid: int) -> float:
    """The CPU time process `pid` has used."""
    spent = psutil.Process(pid).cpu_times()
    return float(spent.user + spent.system)


def gone(pids: list[int], timeout: float = 5.0) -> bool:
    """True once none of `pids` is a running process (zombies count as gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                continue
        if not alive:
            return True
        time.sleep(0.05)
    return False


# ---------------------------------------------------------------------------------------------- fairness


async def test_a_key_holds_at_most_its_share_and_another_key_goes_first() -> None:
    slots = FairSlots(2, 1, 8)
    await slots.acquire("hostile")
    second = asyncio.create_task(slots.acquire("hostile"))
    await asyncio.sleep(0.01)
    assert not second.done() and slots.held("hostile") == 1  # one slot is free, but not for this key
    await asyncio.wait_for(slots.acquire("other"), 1)  # the other key takes it at once
    third = asyncio.create_task(slots.acquire("third"))
    await asyncio.sleep(0.01)
    assert not third.done()
    slots.release("hostile")  # the hostile key's waiting call was first in line and is under its cap again
    await asyncio.wait_for(second, 1)
    assert not third.done()
    slots.release("other")
    await asyncio.wait_for(third, 1)
    slots.release("hostile")
    slots.release("third")
    assert slots.held("hostile") == slots.held("third") == slots.waiting() == 0


async def test_a_key_with_too_many_waiting_calls_is_refused() -> None:
    slots = FairSlots(2, 1, 2)
    await slots.acquire("k")
    waiting = [asyncio.create_task(slots.acquire("k")) for _ in range(2)]
    await asyncio.sleep(0.01)
    with pytest.raises(RateLimited) as refused:
        await slots.acquire("k")
    assert refused.value.code == 4290 and refused.value.headers["Retry-After"] == "1"
    for _ in range(3):
        slots.release("k")
        await asyncio.sleep(0.01)
    assert all(t.done() for t in waiting) and slots.held("k") == 0


async def test_a_cancelled_wait_gives_no_slot_away() -> None:
    slots = FairSlots(1, 1, 8)
    await slots.acquire("a")
    waiter = asyncio.create_task(slots.acquire("b"))
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert slots.waiting() == 0
    # Granted and cancelled in the same turn: the slot comes back.
    late = asyncio.create_task(slots.acquire("b"))
    await asyncio.sleep(0.01)
    slots.release("a")
    late.cancel()
    with pytest.raises(asyncio.CancelledError):
        await late
    assert slots.held("b") == 0
    await asyncio.wait_for(slots.acquire("c"), 1)


def test_threads_wait_their_turn_too() -> None:
    slots = FairSlots(2, 2, 8)
    held, peak, lock = [0], [0], threading.Lock()

    def use() -> None:
        slots.acquire_sync("k")
        with lock:
            held[0] += 1
            peak[0] = max(peak[0], held[0])
        time.sleep(0.02)
        with lock:
            held[0] -= 1
        slots.release("k")

    threads = [threading.Thread(target=use) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert peak[0] == 2 and slots.held("k") == 0


# ---------------------------------------------------------------------------------------------- workers


@pytest.mark.slow  # worker processes
async def test_an_uninterruptible_function_is_killed_at_its_time_limit(
    pool: WorkerPool, cfg: engine.EngineConfig
) -> None:
    before = sorted(pool.pids())
    started = time.monotonic()
    with pytest.raises(Timeout) as stopped:
        await query(pool, cfg, UNINTERRUPTIBLE)
    took = time.monotonic() - started
    assert stopped.value.code == 5003
    # not the ~15 s the function needs (the slack is for a busy machine, not for the function)
    assert took < cfg.timeout_s + GRACE_S + 5.0, took
    after = sorted(pool.pids())
    assert len(after) == pool.size + worker.SPARE and len(set(before) & set(after)) == len(after) - 1
    assert pool.replaced == 1
    assert gone(sorted(set(before) - set(after)))
    assert (await query(pool, cfg, "SELECT 43 AS n", name="q_2")).head == [{"n": 43}]
    assert os.listdir(cfg.results) == ["q_2.parquet"]


@pytest.mark.slow  # worker processes
async def test_an_interrupted_statement_keeps_its_worker(pool: WorkerPool, cfg: engine.EngineConfig) -> None:
    before = sorted(pool.pids())
    with pytest.raises(Timeout):
        await query(pool, with_timeout(cfg, 0.3), INTERRUPTIBLE)
    assert sorted(pool.pids()) == before and pool.replaced == 0


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every `worker.set_nice(pid, nice)` made meanwhile, in order (each still takes effect)."""
    made: list[tuple[int, int]] = []
    real = worker.set_nice

    def spy(pid: int, nice: int) -> bool:
        made.append((pid, nice))
        return real(pid, nice)

    monkeypatch.setattr(worker, "set_nice", spy)
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
    cfg: engine.EngineConfig, calls: list[tuple[int, int]]
) -> None:
    made = WorkerPool(1, 1, worker.memory_bytes(0, "512MB"), demote=(0.3, 15, True))
    try:
        assert (await query(made, cfg, "SELECT 1 AS n")).head == [{"n": 1}]
        assert calls == []  # a short call keeps its priority
        task = asyncio.create_task(query(made, with_timeout(cfg, 3.0), INTERRUPTIBLE, name="q_2"))
        [busy] = await eventually(made.busy_pids, what="the long call running")
        # lowered once it ran 0.3 s: every thread of the worker, DuckDB's included
        await eventually(lambda: thread_nices(busy) == {15}, timeout=10, what="the long call lowered")
        # Under SCHED_IDLE too where that can be undone: a call's thread that wakes up takes the CPU at once.
        assert thread_policies(busy) == {os.SCHED_IDLE if made.may_raise else os.SCHED_OTHER}
        assert thread_cpus(busy) == {cpus.all_cpus()}  # alone on the host: every core
        # While the process answers other calls (as the executor counts them), it keeps off one core.
        cpus.call_started()
        cpus.call_started()
        try:
            confined = {cpus.background_cpus() or cpus.all_cpus()}
            await eventually(lambda: thread_cpus(busy) == confined, timeout=10, what="the long call kept off a core")
        finally:
            cpus.call_finished()
            cpus.call_finished()
        await eventually(lambda: thread_cpus(busy) == {cpus.all_cpus()}, timeout=10, what="every core given back")
        assert not task.done()  # all of it seen while the call still ran
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
async def test_a_server_started_with_a_niceness_keeps_it_for_its_workers(cfg: engine.EngineConfig) -> None:
    os.setpriority(os.PRIO_PROCESS, 0, 3)  # as `nice -n 3 cairn serve`: the threads started from here inherit it
    try:
        made = WorkerPool(1, 1, worker.memory_bytes(0, "512MB"), demote=(0.1, 10, False))
        try:
            task = asyncio.create_task(query(made, with_timeout(cfg, 2.5), INTERRUPTIBLE))
            [busy] = await eventually(made.busy_pids, what="the long call running")
            # lowered (after 0.1 s) by 10 from where it started
            await eventually(lambda: thread_nices(busy) == {13}, timeout=10, what="the long call lowered")
            cpus.call_started()
            cpus.call_started()
            try:
                await asyncio.sleep(0.2)
                assert thread_cpus(busy) == {cpus.all_cpus()}  # never confined without `confine`
            finally:
                cpus.call_finished()
                cpus.call_finished()
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
    cfg: engine.EngineConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = WorkerPool(1, 1, worker.memory_bytes(0, "512MB"), demote=(0.05, 10, False))
    real = worker.set_nice
    monkeypatch.setattr(worker, "set_nice", lambda pid, nice: nice > 0 and real(pid, nice))
    try:
        before = made.pids()
        with pytest.raises(Timeout):
            await query(made, with_timeout(cfg, 0.3), INTERRUPTIBLE)
        assert made.replaced == 1
        demoted = set(before) - set(made.pids())
        assert len(demoted) == 1 and gone(sorted(demoted))
        assert (await query(made, cfg, "SELECT 43 AS n", name="q_2")).head == [{"n": 43}]
        assert all(thread_nices(pid) == {0} for pid in made.pids())
    finally:
        made.close()


# Lowering ahead of time is only done where a priority can be raised again (CAP_SYS_NICE, RLIMIT_NICE).
ahead_of_time = pytest.mark.skipif(
    not worker.may_raise(os.getpriority(os.PRIO_PROCESS, 0)), reason="lowers priorities it could not raise again"
)


@pytest.mark.slow  # worker processes
@ahead_of_time
async def test_a_key_whose_call_ran_long_starts_its_next_calls_lowered(
    cfg: engine.EngineConfig, calls: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    made = WorkerPool(2, 1, worker.memory_bytes(0, "512MB"), demote=(0.1, 10, False))
    try:
        with pytest.raises(Timeout):
            await query(made, with_timeout(cfg, 0.4), INTERRUPTIBLE, caller="heavy")
        assert [n for _, n in calls] == [10, 0]  # lowered once it ran long, put back at its end
        calls.clear()
        assert (await query(made, cfg, "SELECT 1 AS n", caller="heavy", name="q_2")).head == [{"n": 1}]
        [(pid, _), _] = calls
        assert calls == [(pid, 10), (pid, 0)]  # a short call of the same key: lowered from its start
        calls.clear()
        assert (await query(made, cfg, "SELECT 2 AS n", caller="light", name="q_3")).head == [{"n": 2}]
        assert calls == []  # another key's call keeps the worker's priority
        monkeypatch.setattr(worker, "LOWERED_FOR_S", 0.0)  # the heavy key's long call is now long ago
        assert (await query(made, cfg, "SELECT 3 AS n", caller="heavy", name="q_4")).head == [{"n": 3}]
        assert calls == []
        assert all(thread_nices(pid) == {0} for pid in made.pids())
    finally:
        made.close()


@pytest.mark.slow  # worker processes
@ahead_of_time
async def test_the_replacement_of_a_worker_killed_during_a_call_starts_lowered(
    cfg: engine.EngineConfig, calls: list[tuple[int, int]]
) -> None:
    # Lowered by 10 after 5 s: the heavy call outruns its 0.3 s first, and the light call below is never
    # lowered however slowly a busy machine runs it (only the replacement's start is judged).
    made = WorkerPool(1, 1, worker.memory_bytes(0, "512MB"), demote=(5.0, 10, False))
    try:
        before = set(made.pids())
        with pytest.raises(Timeout):
            await query(made, with_timeout(cfg, 0.3), UNINTERRUPTIBLE, caller="heavy")
        [fresh] = set(made.pids()) - before
        [replacement] = [w for w in made._idle if w.pid == fresh]
        replacement.wait_ready(60)
        assert thread_nices(fresh) == {10}  # it started lowered: its start-up is the heavy key's cost
        assert thread_policies(fresh) == {os.SCHED_IDLE}
        calls.clear()
        # The next call takes the latest worker to have come back, the replacement; another key's call
        # runs at the worker's own priority.
        assert (await query(made, cfg, "SELECT 2 AS n", caller="light", name="q_2")).head == [{"n": 2}]
        assert calls == [(fresh, 0)]
        assert all(thread_nices(pid) == {0} for pid in made.pids())
        assert all(thread_policies(pid) == {os.SCHED_OTHER} for pid in made.pids())
    finally:
        made.close()


@pytest.mark.slow  # worker processes
async def test_a_worker_killed_while_idle_is_replaced_before_the_next_call(
    pool: WorkerPool, cfg: engine.EngineConfig
) -> None:
    await query(pool, cfg, "SELECT 1 AS n")
    victims = pool.pids()
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    assert gone(victims)
    # No error (a dead worker never saw the call); two keys at once use both (replaced) workers.
    answers = await asyncio.gather(*(query(pool, cfg, "SELECT 2 AS n", key, f"q_{key}") for key in "ab"))
    assert [a.head for a in answers] == [[{"n": 2}]] * 2
    # The spare, dead too, was replaced as well (before it could be handed a call).
    assert not set(victims) & set(pool.pids()) and pool.replaced == len(victims) == pool.size + worker.SPARE


@pytest.mark.slow  # worker processes
async def test_a_new_worker_opens_the_latest_calls_databases_before_it_greets(
    pool: WorkerPool, cfg: engine.EngineConfig, tmp_path: Path
) -> None:
    other = small_engine_config(tmp_path / "other", memory_limit="512MB", timeout_s=1.0)  # another lockdown
    await query(pool, cfg, "SELECT 1 AS n")
    await query(pool, other, "SELECT 1 AS n")
    # The pool remembers both lockdowns; the replacement of a killed worker opens both before it greets.
    [victim, *_] = pool.pids()
    os.kill(victim, signal.SIGKILL)
    assert gone([victim])
    fresh = worker._Worker(0, list(pool._recent.values()))
    cold = worker._Worker(0)
    try:
        await asyncio.to_thread(fresh.wait_ready, 60)
        await asyncio.to_thread(cold.wait_ready, 60)
        assert (fresh.opened, cold.opened) == (2, 0)
        # Its first call reuses the database opened for it.
        args: tuple[Any, ...] = ("SELECT 2 AS n", [], {}, cfg.results / "q_9.parquet", 10, 10)
        reply = await asyncio.to_thread(fresh.call, (engine.execute_to_store, cfg, args, {}, 1.0), 5.0)
        assert reply is not None and reply.unwrap().head == [{"n": 2}] and reply.opened == 2
    finally:
        fresh.end()
        cold.end()
    answers = await asyncio.gather(
        *(query(pool, c, "SELECT 3 AS n", k, f"q_{k}") for c, k in ((cfg, "a"), (other, "b")))
    )
    assert [a.head for a in answers] == [[{"n": 3}]] * 2 and victim not in pool.pids()


@pytest.mark.slow  # worker processes
async def test_a_worker_killed_mid_call_gives_a_clean_error_and_leaves_nothing(
    pool: WorkerPool, cfg: engine.EngineConfig
) -> None:
    await query(pool, cfg, "SELECT 1 AS n", name="q_0")  # started workers: the kill lands mid-call, not mid-boot
    long = with_timeout(cfg, 60)
    call = asyncio.create_task(query(pool, long, ENDLESS, max_rows=10**9))
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
    assert (await query(pool, cfg, "SELECT 3 AS n", name="q_2")).head == [{"n": 3}]


@pytest.mark.slow  # worker processes
async def test_errors_keep_their_class_message_and_suggestions(pool: WorkerPool, cfg: engine.EngineConfig) -> None:
    path = cfg.roots[0] / "a.csv"
    src = engine.make_source("a", str(path), [path])
    args: tuple[Any, ...] = ("SELECT xx FROM a", [src], {}, cfg.results / "q_1.parquet", 1000, 10)
    with pytest.raises(SchemaError) as bad:
        await pool.run("k", engine.execute_to_store, cfg, args, {})
    assert bad.value.code == 4003 and "Did you mean 'x'" in bad.value.message and bad.value.suggestions
    assert pool.replaced == 0  # an error about the statement keeps the worker


@pytest.mark.slow  # worker processes
async def test_a_worker_out_of_memory_answers_5002_and_is_replaced(cfg: engine.EngineConfig) -> None:
    small = WorkerPool(1, 1, 400 * 1024 * 1024)  # DuckDB's own limit (4 GB) is not what stops it
    try:
        big = engine.EngineConfig(**{**cfg.__dict__, "memory_limit": "4GB", "timeout_s": 30.0})
        with pytest.raises(MemoryLimit) as full:
            await query(small, big, "SELECT length(string_agg(repeat('x', 1000000), '')) AS n FROM range(600)")
        assert full.value.code == 5002 and small.replaced == 1
        assert (await query(small, big, "SELECT 4 AS n", name="q_2")).head == [{"n": 4}]
    finally:
        small.close()


@pytest.mark.slow  # worker processes
async def test_a_call_in_a_thread_uses_the_same_slots(pool: WorkerPool, cfg: engine.EngineConfig) -> None:
    stored = await query(pool, cfg, "SELECT range AS n FROM range(5)")
    rows = await asyncio.to_thread(pool.run_sync, "k", engine.read_rows, cfg, (stored.path, 1, 2), {})
    assert rows == [{"n": 1}, {"n": 2}]


@pytest.mark.slow  # worker processes
async def test_one_key_cannot_hold_up_another(pool: WorkerPool, cfg: engine.EngineConfig) -> None:
    hostile = [asyncio.create_task(query(pool, cfg, UNINTERRUPTIBLE, "hostile", f"q_h{i}")) for i in range(2)]
    await eventually(
        lambda: len(pool.busy_pids()) == 1 and pool.slots.waiting() == 1,
        what="one hostile call running, the other waiting for its key's share",
    )
    started = time.monotonic()
    answer = await query(pool, cfg, "SELECT 43 AS n", "other", "q_o")
    took = time.monotonic() - started
    # answered while the first hostile call still ran, the second still waiting: not behind them
    assert answer.head == [{"n": 43}] and pool.slots.waiting() == 1 and not any(t.done() for t in hostile), took
    for task in hostile:
        with pytest.raises(Timeout):
            await task


@pytest.mark.slow  # worker processes
async def test_closing_the_pool_stops_its_workers(cfg: engine.EngineConfig) -> None:
    made = WorkerPool(2, 1, 0)
    await query(made, cfg, "SELECT 1 AS n")
    pids = made.pids()
    made.close()
    assert gone(pids)


@pytest.mark.slow  # worker processes
def test_workers_do_not_outlive_a_killed_server(tmp_path: Path) -> None:
    """The server is SIGKILLed (no shutdown hook, no atexit): its workers still exit at once."""
    script = textwrap.dedent(
        """
        import sys, time
        from app.datasets.worker import WorkerPool
        pool = WorkerPool(2, 1, 0)
        print(" ".join(str(p) for p in pool.pids()), flush=True)
        time.sleep(60)
        """
    )
    server = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert server.stdout is not None
        pids = [int(p) for p in server.stdout.readline().split()]
        assert len(pids) == 2 + worker.SPARE and all(psutil.pid_exists(p) for p in pids)
        server.kill()
        server.wait(10)
        assert gone(pids)
    finally:
        server.kill()


# ---------------------------------------------------------------------------------------------- cuts

LONG = "é" * 1000


def stored(cfg: engine.EngineConfig, sql: str) -> Path:
    """`sql`'s result written as a stored result (in this process)."""
    return engine.execute_to_store(cfg, sql, [], {}, cfg.results / "q_cut.parquet", 1000).path


def plain(cfg: engine.EngineConfig, path: Path) -> list[dict[str, Any]]:
    """The stored rows read whole, then made JSON-safe: what a page showed before values were cut in SQL."""

    def work(con: Any) -> list[dict[str, Any]]:
        cur = con.execute(f"SELECT * FROM read_parquet('{path}')")
        return engine.rows_as_dicts([d[0] for d in cur.description], cur.fetchall())

    rows: list[dict[str, Any]] = engine.run_locked(cfg, [], work)
    return rows


def test_values_are_cut_in_sql_to_what_a_reply_shows(cfg: engine.EngineConfig) -> None:
    path = stored(
        cfg,
        f"""SELECT '{LONG}' AS text, 'short' AS small, repeat('ab', 500)::BLOB AS raw, 'x'::BLOB AS tiny,
        [repeat('z', 400) FOR i IN range(80)] AS texts, range(100) AS numbers, [1, 2]::INTEGER[2] AS pair,
        {{'name': '{LONG}', 'n': 7, 'inner': {{'deep': repeat('q', 500)}}}} AS record,
        MAP {{'k': '{LONG}'}} AS mapping, [{{'a': '{LONG}'}}] AS records, NULL::VARCHAR AS nothing,
        NULL::STRUCT(a VARCHAR) AS no_record, 42 AS answer, DATE '2024-02-29' AS day, 1.5::DECIMAL(4, 2) AS price
        FROM range(3)""",
    )
    cut = engine.read_rows(cfg, path, 0, 10)
    assert cut == plain(cfg, path)  # the same answer as cutting after the fact
    row = cut[0]
    assert row["text"] == "é" * 300 + "…" and row["small"] == "short" and row["record"]["name"].endswith("…")
    assert len(row["texts"]) == 50 and row["texts"][0] == "z" * 300 + "…" and row["numbers"] == list(range(50))
    assert row["nothing"] is None and row["no_record"] is None and row["answer"] == 42


def test_nothing_long_reaches_python(cfg: engine.EngineConfig) -> None:
    path = stored(cfg, "SELECT repeat('x', 1000000) AS a, repeat('y', 1000000) AS a2, [repeat('z', 100000)] AS l")

    def fetched(con: Any) -> list[Any]:
        query, _ = engine.capped_query(con, f"read_parquet('{path}')")
        return list(con.execute(query).fetchone())

    values = engine.run_locked(cfg, [], fetched)
    assert [len(values[0]), len(values[1]), len(values[2][0])] == [301, 301, 301]


def test_a_page_stops_at_its_byte_cap(cfg: engine.EngineConfig) -> None:
    columns = ", ".join(f"repeat('v', 400) AS c{i}" for i in range(40))
    path = stored(cfg, f"SELECT {columns} FROM range(1000)")  # ~12 MB once shown
    rows = engine.read_rows(cfg, path, 0, 1000)
    weight = sum(engine._weight(r) for r in rows)
    assert 0 < len(rows) < 1000 and weight <= engine.PAGE_MAX_BYTES
    assert len(engine.read_rows(cfg, path, 0, 5)) == 5


def test_a_summary_cuts_the_extremes_of_long_values(cfg: engine.EngineConfig) -> None:
    path = stored(cfg, "SELECT repeat('m', 100000) || range AS t FROM range(3)")
    summary = engine.summarize_stored(cfg, path)
    assert summary["rows"] == 3 and summary["columns"]["t"]["min"] == "m" * 40 + "…"


def test_a_sample_cuts_long_values_in_sql(cfg: engine.EngineConfig) -> None:
    path = cfg.roots[0] / "long.csv"
    path.write_text("id,note\n" + "".join(f"{i},{'n' * 5000}\n" for i in range(3)))
    src = engine.make_source("long", str(path), [path])

    def fetched(con: Any) -> list[Any]:
        rows: list[Any] = con.execute(
            f"SELECT {engine.capped_columns(con, 'long', ['id', 'note'])} FROM long"
        ).fetchall()
        return rows

    assert [len(note) for _, note in engine.run_locked(cfg, [src], fetched)] == [301] * 3
    sampled = profiling.sample(cfg, src, strategy="random", size=2, columns=None, stratify_column=None, seed=1)
    assert [row["note"] for row in sampled["rows"]] == ["n" * 300 + "…"] * 2


def test_the_rendering_rule_of_values() -> None:
    """docs/datasets.md, "Values": numbers a float64 cannot hold exactly travel as text."""
    big = 2**53
    assert [engine.jsonable(v) for v in (big - 1, big, -big, True)] == [big - 1, str(big), str(-big), True]
    decimals = ["1.50", "0.1000000000", "123456789012345.678", "12345678901234567890", "-0.000"]
    assert [engine.jsonable(Decimal(d)) for d in decimals] == [
        1.5,
        0.1,
        "123456789012345.678",
        "12345678901234567890",
        -0.0,
    ]
    assert [engine.jsonable(float(f)) for f in ("nan", "inf", "-inf")] == ["NaN", "Infinity", "-Infinity"]
    assert engine.jsonable(b"\x00\xff" * 100) == "base64:" + base64.b64encode(b"\x00\xff" * 48).decode() + "…"
    assert engine.jsonable(b"\x00\xff" * 100, cut=False) == "base64:" + base64.b64encode(b"\x00\xff" * 100).decode()
    assert engine.jsonable({1: [Decimal("2.5")], None: "x"}) == {"1": [2.5], "null": "x"}
    assert [engine.cell_text(v) for v in (None, True, 1.5, [1, "a"], {"k": None}, "x")] == [
        "",
        "true",
        "1.5",
        '[1,"a"]',
        '{"k":null}',
        "x",
    ]


def test_dates_a_csv_writes_its_own_way_are_shown_in_iso(cfg: engine.EngineConfig) -> None:
    """DuckDB answers a cast to VARCHAR of a CSV column with the column's raw text: what a sample and a
    profile show is the text of the parsed value."""
    path = cfg.roots[0] / "dmy.csv"
    path.write_text("id,day,at\n1,29/02/2024,1:02:03\n2,01/03/2024,13:00:00\n")
    src = engine.make_source("dmy", str(path), [path])
    sampled = profiling.sample(cfg, src, strategy="head", size=2, columns=None, stratify_column=None, seed=1)
    assert sampled["rows"] == [
        {"id": 1, "day": "2024-02-29", "at": "01:02:03"},
        {"id": 2, "day": "2024-03-01", "at": "13:00:00"},
    ]
    prof = profiling.profile(cfg, src, sample_size=100, compute_stats=True, max_categories=10)
    day = next(c for c in prof["schema"]["columns"] if c["name"] == "day")
    assert day["sample_values"] == ["2024-02-29", "2024-03-01"]
    assert day["stats"] == {"min": "2024-02-29", "max": "2024-03-01"}


def test_memory_caps_follow_the_duckdb_limit() -> None:
    mb = worker.MB
    assert worker.memory_bytes(0, "2GB") == 2048 * mb + worker.WORKER_HEADROOM
    assert worker.memory_bytes(0, "512 MiB") == 512 * mb + worker.WORKER_HEADROOM
    assert worker.memory_bytes(0, "80%") == 4096 * mb
    assert worker.memory_bytes(700, "2GB") == 700 * mb


@pytest.mark.slow  # worker processes
async def test_an_unexpected_error_is_raised_as_it_was_and_the_worker_replaced(
    pool: WorkerPool, cfg: engine.EngineConfig
) -> None:
    with pytest.raises(TypeError):
        await pool.run("k", engine.read_rows, cfg, (), {})  # not a statement error: a bug
    assert pool.replaced == 1
    with pytest.raises(CairnError) as outside:
        await pool.run("k", engine.read_rows, cfg, (cfg.work / "elsewhere.parquet", 0, 1), {})
    assert outside.value.code == 4002 and pool.replaced == 1


def test_replies_are_taken_whole_in_order_however_they_arrive() -> None:
    ours, theirs = socket.socketpair()
    sender = Connection(theirs.detach())
    sender.send_bytes(b"first")
    sender.send_bytes(b"x" * 70_000)
    sender.close()
    raw = b""
    while chunk := ours.recv(1 << 16):
        raw += chunk
    ours.close()
    box, got = bytearray(), []
    for byte in raw:  # one byte at a time: every frame is seen in part first
        box.append(byte)
        if (frame := worker.take_frame(box)) is not None:
            got.append(frame)
    assert got == [b"first", b"x" * 70_000] and not box
    # A message past 2 GiB is framed with -1 and an 8-byte length.
    long = bytearray(struct.pack("!i", -1) + struct.pack("!Q", 3) + b"abcrest")
    assert worker.take_frame(long) == b"abc" and long == b"rest"


@pytest.mark.slow  # worker processes
async def test_a_call_from_the_event_loop_takes_no_thread(
    pool: WorkerPool, cfg: engine.EngineConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    await query(pool, cfg, "SELECT 1 AS n")  # a worker has greeted
    handed: list[Any] = []
    submit = pool._threads.submit

    def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        handed.append(fn)
        return submit(fn, *args, **kwargs)

    monkeypatch.setattr(pool._threads, "submit", counted)
    monkeypatch.setattr(worker, "READ_CHUNK", 7)  # each reply is read in many pieces
    wide = "SELECT {i} AS n, repeat('x', 3000) AS t"
    answers = [await query(pool, cfg, wide.format(i=i), name=f"q_{i}") for i in range(3)]
    assert [(a.head or [{}])[0].get("n") for a in answers] == [0, 1, 2]
    # An early answer (all rows in it), then the final one once the file is written.
    args: tuple[Any, ...] = ("SELECT 7 AS n", [], {}, cfg.results / "q_e.parquet", 1000, 10)
    early, final = await pool.run_staged("k", engine.execute_to_store, cfg, args, {})
    assert early.head == [{"n": 7}] and final is not None and (await final).path.is_file()
    assert handed == []
    # A worker that died while idle never saw the request: the call goes to a thread and is answered.
    for pid in pool.pids():
        os.kill(pid, signal.SIGKILL)
    assert gone(pool.pids())
    assert (await query(pool, cfg, "SELECT 2 AS n", name="q_d")).head == [{"n": 2}]
    assert handed


@pytest.mark.slow  # worker processes
async def test_a_conversation_cancelled_mid_call_never_hands_its_worker_the_next_call(
    pool: WorkerPool, cfg: engine.EngineConfig
) -> None:
    await query(pool, cfg, "SELECT 1 AS n")  # a worker has greeted
    args: tuple[Any, ...] = (INTERRUPTIBLE, [], {}, cfg.results / "q_c.parquet", 1000, 10)
    done = await pool._start("k", engine.execute_to_store, cfg, args, {}, None)
    [busy] = await eventually(pool.busy_pids, what="the call given to a worker")
    before = _cpu_seconds(busy)
    await eventually(lambda: _cpu_seconds(busy) > before + 0.1, what="the worker answering the call")
    done.cancel()  # as when the event loop is torn down
    with contextlib.suppress(asyncio.CancelledError):
        await done
    assert gone([busy])  # it may still have been answering: killed, not handed another call
    assert (await query(pool, cfg, "SELECT 3 AS n", name="q_n")).head == [{"n": 3}]
