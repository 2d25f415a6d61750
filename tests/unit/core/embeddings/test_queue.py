"""app/core/embeddings/queue.py: background batches give way to the calls the process is answering
(the process's one load signal), within the defer bound; the provider's outage is remembered with
when it began, and a report on a call's rows reads nothing when nothing failed. The queue's work on a database is tested
end to end (tests/e2e/test_embedding_queue.py, test_embedding_fairness.py)."""

from __future__ import annotations

from typing import Any, cast

from app.core.config import Settings
from app.core.embeddings.load import LOAD, Load
from app.core.embeddings.queue import QUIET_SECONDS, EmbeddingQueue


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
