"""app/core/embeddings/queue.py: background batches give way to the calls the process is answering
(the process's one load signal), within the defer bound; the provider's outage is remembered with
when it began, and a report on a call's rows reads nothing when nothing failed; a batch is made
caller by caller, the smallest first, each part stored before the next is embedded, and a light
caller's rows are made soon by a bounded number of tasks. The queue's work on a database is tested
end to end (tests/e2e/test_embedding_queue.py, test_embedding_fairness.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.config import Settings
from app.core.db import Database
from app.core.embeddings.load import LOAD, Load
from app.core.embeddings.queue import (
    PART_ROWS,
    QUIET_SECONDS,
    SOON_TASKS,
    BatchResult,
    EmbeddingQueue,
    batch_parts,
)
from app.core.embeddings.repository import EmbeddingQueueRepository, LeasedJob
from app.core.embeddings.targets import EmbeddingTarget
from tests.support.databases import database_fixture


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def queue(load: Load, defer: float = 10.0) -> EmbeddingQueue:
    # No database: `give_way` reads one only while the process is busy and deferring is on.
    settings = Settings(embedding_queue_defer_seconds=defer)
    return EmbeddingQueue(cast(Any, None), cast(Any, None), [], settings, load=load)


def test_the_queue_reads_the_process_load_by_default() -> None:
    made = EmbeddingQueue(cast(Any, None), cast(Any, None), [], Settings())
    assert made.load is LOAD


def test_busy_follows_the_calls_in_flight_and_the_quiet_gap() -> None:
    clock = Clock()
    load = Load(clock)
    q = queue(load)
    assert not q.busy()
    with load.call():
        assert q.busy()
    clock.now += QUIET_SECONDS / 2
    assert q.busy()
    clock.now += QUIET_SECONDS
    assert not q.busy()


async def test_a_quiet_process_or_no_defer_bound_never_holds_back() -> None:
    load = Load()
    assert await queue(load).give_way() == 0.0
    with load.call():
        assert await queue(load, defer=0).give_way() == 0.0


async def test_the_outage_keeps_when_it_began_and_nothing_failed_reads_no_database() -> None:
    q = queue(Load())  # no database: a report with nothing failed must not need one
    assert q.outage is None and await q.pending_report([1, 2]) is None
    q._provider_failed("EmbeddingUnavailable: ConnectError")
    first = q.outage
    assert first is not None and first.error == "EmbeddingUnavailable: ConnectError"
    q._provider_failed("EmbeddingUnavailable: ReadTimeout")
    assert q.outage is not None and q.outage.since == first.since and q.outage.error.endswith("ReadTimeout")


def _job(i: int, owner: str, project: str = "p") -> LeasedJob:
    return LeasedJob(id=i, target="t", ref=str(i), version=1, attempts=1, owner=owner, project=project)


def test_a_batch_is_made_by_caller_the_smallest_first_small_callers_together() -> None:
    jobs = [_job(i, "a") for i in range(20)] + [_job(100, "b")] + [_job(200 + i, "c") for i in range(20)]
    jobs += [_job(300 + i, "a", "other") for i in range(3)] + [_job(400, "")]
    parts = batch_parts(jobs)
    assert [len(p) for p in parts] == [5, 20, 20]
    assert {(j.owner, j.project) for j in parts[0]} == {("b", "p"), ("", "p"), ("a", "other")}
    many = batch_parts([_job(i, f"k{i}") for i in range(3 * PART_ROWS)])
    assert [len(p) for p in many] == [PART_ROWS] * 3
    assert batch_parts([]) == []


async def test_a_light_callers_rows_are_made_soon_by_a_bounded_number_of_tasks() -> None:
    release = asyncio.Event()
    asked: list[list[int]] = []

    async def run_batch(ids: Sequence[int] | None = None, *, urgent: bool = False) -> BatchResult:
        asked.append(list(ids or []))
        await release.wait()
        return BatchResult(len(ids or []), {})

    idle = EmbeddingQueue(cast(Any, None), cast(Any, None), [], Settings(embedding_queue_workers=0))
    assert not idle.embed_soon([1])  # a process that runs no workers leaves its rows to the others
    q = queue(Load())
    q.run_batch = run_batch  # type: ignore[method-assign]
    assert all(q.embed_soon([i]) for i in range(SOON_TASKS))
    assert not q.embed_soon([99])  # at most SOON_TASKS at once: the workers make the rest
    await asyncio.sleep(0)
    assert sorted(asked) == [[i] for i in range(SOON_TASKS)]
    release.set()
    await asyncio.gather(*q._soon)
    assert q.embed_soon([7])
    await q.stop()  # a task in flight is cancelled with the workers


# A batch on a real database: each caller's part is stored before the next part is embedded.
MODEL = "parts-test"


queue_db = database_fixture([])


class Recorder:
    """An embedder that records, for each call, its texts and which queue rows were left then."""

    model = MODEL

    def __init__(self, db: Database, fail_on: str | None = None) -> None:
        self.db = db
        self.fail_on = fail_on
        self.calls: list[tuple[list[str], int]] = []
        self.priorities: list[str] = []

    async def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        async with self.db.transaction() as session:
            left = await EmbeddingQueueRepository(session).scalar("SELECT count(*) FROM embedding_queue")
        self.calls.append((list(texts), int(left)))
        if self.fail_on is not None and any(t.startswith(self.fail_on) for t in texts):
            raise RuntimeError("provider down")
        return [[1.0] for _ in texts]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.priorities.append("normal")
        return await self._embed(texts)

    async def embed_background(self, texts: Sequence[str]) -> list[list[float]]:
        self.priorities.append("background")
        return await self._embed(texts)

    async def check(self) -> None:
        raise RuntimeError("provider down")


def _target(stored: list[str]) -> EmbeddingTarget:
    async def texts(_s: AsyncSession, refs: list[str]) -> dict[str, str]:
        return {r: r for r in refs}

    async def store(_s: AsyncSession, _model: str, items: list[tuple[str, list[float]]]) -> None:
        stored.extend(r for r, _ in items)

    async def missing(_s: AsyncSession, _model: str, _limit: int) -> list[str]:
        return []

    return EmbeddingTarget("t", texts, store, missing)


async def _fill(db: Database) -> None:
    async with db.transaction() as session:
        repo = EmbeddingQueueRepository(session)
        await repo.execute("DELETE FROM embedding_queue")
        await repo.enqueue("t", [f"bulk-{i}" for i in range(30)], MODEL, owner="a")
        await repo.enqueue("t", ["few-1", "few-2"], MODEL, owner="b")


async def test_a_callers_few_rows_are_stored_before_another_callers_part_is_embedded(queue_db: Database) -> None:
    await _fill(queue_db)
    stored: list[str] = []
    embedder = Recorder(queue_db)
    q = EmbeddingQueue(queue_db, cast(Any, embedder), [_target(stored)], Settings(embedding_queue_batch=64))
    result = await q.run_batch()
    assert result.leased == 32 and not result.failed
    (first, left_first), (second, left_second) = embedder.calls
    assert sorted(first) == ["few-1", "few-2"] and left_first == 32
    assert len(second) == 30 and left_second == 30  # the two rows were stored and done before
    assert embedder.priorities == ["normal", "background"]  # a small part does not wait for the backlog
    assert set(stored[:2]) == {"few-1", "few-2"} and len(stored) == 32


async def test_when_a_part_fails_the_parts_not_yet_made_are_given_back(queue_db: Database) -> None:
    await _fill(queue_db)
    q = EmbeddingQueue(queue_db, cast(Any, Recorder(queue_db, fail_on="few")), [_target([])], Settings())
    with pytest.raises(RuntimeError):
        await q.run_batch()
    async with queue_db.transaction() as session:
        rows = await EmbeddingQueueRepository(session).rows(
            "SELECT owner, leased_until IS NULL AS free, last_error FROM embedding_queue"
        )
    bulk = [r for r in rows if r["owner"] == "a"]
    assert len(bulk) == 30 and all(r["free"] and r["last_error"] is None for r in bulk)  # due again at once
    few = [r for r in rows if r["owner"] == "b"]
    assert len(few) == 2 and all(r["last_error"] == "RuntimeError: provider down" for r in few)
