"""app/core/embeddings/calls.py: a call's queued vectors as its after-commit hook (wake, wait when asked,
report `embedding`), and the query vector of a search."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, cast

import pytest
from pydantic import BaseModel

from app.core.config import Settings
from app.core.context import OPEN_PRINCIPAL, AppState, CallContext
from app.core.embeddings.calls import QueuedVectors, enqueue, query_vector
from app.core.embeddings.provider import EmbeddingUnavailable
from app.core.embeddings.queue import WaitResult
from app.core.executor import run_commit_hooks
from app.core.registry import Registry


class Reply(BaseModel):
    id: str = "x"
    embedding: str = "pending"


class Plain(BaseModel):
    id: str = "x"


class FakeQueue:
    """Records wakes and waits; a wait leaves `remaining` of the ids queued."""

    def __init__(self, remaining: int = 0) -> None:
        self.remaining = remaining
        self.woken = 0
        self.waits: list[tuple[list[int], float]] = []

    def wake(self) -> None:
        self.woken += 1

    async def wait(self, ids: Sequence[int], timeout: float) -> WaitResult:
        self.waits.append((list(ids), timeout))
        return WaitResult(remaining=list(ids)[: self.remaining], failed={})


class FakeEmbedder:
    model = "m"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    async def embed_one(self, text: str) -> list[float]:
        if self.fail:
            raise EmbeddingUnavailable("down")
        return [float(len(text))]


class FakeResult:
    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def scalars(self) -> FakeResult:
        return self

    def all(self) -> list[int]:
        return self.ids


class FakeSession:
    """Answers each INSERT into the queue with the next ids."""

    def __init__(self) -> None:
        self.next = 1

    async def execute(self, statement: Any, params: Any = None) -> FakeResult:
        ids = list(range(self.next, self.next + len(params["refs"])))
        self.next += len(ids)
        return FakeResult(ids)


def context(
    queue: FakeQueue | None,
    *,
    mode: str = "async",
    args: BaseModel | None = None,
    embedder: FakeEmbedder | None = None,
) -> CallContext:
    app = AppState(
        settings=Settings(embedding_write_mode=mode, embedding_wait_seconds=3.0),  # type: ignore[arg-type]
        db=cast(Any, None),
        embedder=cast(Any, embedder or FakeEmbedder()),
        registry=Registry(),
        queue=cast(Any, queue),
    )
    return CallContext(
        session=cast(Any, FakeSession()),
        principal=OPEN_PRINCIPAL,
        app=app,
        request_id="r",
        transport="test",
        args=args,
    )


class WriteIn(BaseModel):
    wait_for_embedding: bool | None = None


async def test_enqueue_registers_one_hook_per_call_and_collects_its_rows() -> None:
    ctx = context(FakeQueue())
    assert QueuedVectors.find(ctx) is None
    assert await enqueue(ctx, "notes", ["a", "b"]) == [1, 2]
    assert await enqueue(ctx, "notes", ["c"]) == [3]
    queued = QueuedVectors.find(ctx)
    assert queued is not None and queued.ids == [1, 2, 3]
    assert ctx.commit_hooks == [queued]  # one hook, however many writes


async def test_async_mode_wakes_the_workers_and_answers_pending() -> None:
    queue = FakeQueue()
    ctx = context(queue)
    await enqueue(ctx, "notes", ["a"])
    reply = await run_commit_hooks(ctx, Reply())
    assert reply.embedding == "pending" and queue.woken == 1 and queue.waits == []


@pytest.mark.parametrize(
    ("mode", "asked", "waits"),
    [("sync", None, True), ("async", True, True), ("sync", False, False), ("async", None, False)],
)
async def test_the_call_waits_when_it_asks_else_as_the_mode_says(mode: str, asked: bool | None, waits: bool) -> None:
    queue = FakeQueue()
    ctx = context(queue, mode=mode, args=WriteIn(wait_for_embedding=asked))
    await enqueue(ctx, "notes", ["a", "b"])
    reply = await run_commit_hooks(ctx, Reply())
    assert queue.waits == ([([1, 2], 3.0)] if waits else [])
    assert reply.embedding == ("done" if waits else "pending")


async def test_rows_still_queued_after_the_wait_answer_pending_and_later_hooks_see_the_wait() -> None:
    queue = FakeQueue(remaining=1)
    ctx = context(queue, mode="sync")
    await enqueue(ctx, "notes", ["a", "b"])
    seen: list[WaitResult | None] = []

    async def report(out: Any) -> Any:
        queued = QueuedVectors.find(ctx)
        seen.append(queued.waited if queued is not None else None)
        return out

    ctx.after_commit(report)
    reply = await run_commit_hooks(ctx, Reply())
    assert reply.embedding == "pending"
    assert seen == [WaitResult(remaining=[1], failed={})]


async def test_nothing_queued_or_no_queue_leaves_the_reply_as_it_was() -> None:
    ctx = context(FakeQueue(), mode="sync")
    await enqueue(ctx, "notes", [])
    assert await run_commit_hooks(ctx, Reply(embedding="untouched")) == Reply(embedding="untouched")
    ctx = context(None, mode="sync")  # a process with no queue: the rows wait for another one
    await enqueue(ctx, "notes", ["a"])
    assert (await run_commit_hooks(ctx, Reply())).embedding == "pending"
    ctx = context(FakeQueue(), mode="sync")
    await enqueue(ctx, "notes", ["a"])
    assert await run_commit_hooks(ctx, Plain()) == Plain()  # a reply without the field


async def test_query_vector_is_none_when_the_model_is_unavailable(caplog: pytest.LogCaptureFixture) -> None:
    assert await query_vector(context(None), "four", "notes search") == [4.0]
    with caplog.at_level(logging.WARNING, logger="cairn.embeddings"):
        assert await query_vector(context(None, embedder=FakeEmbedder(fail=True)), "q", "notes search") is None
    assert "notes search without vectors: down" in caplog.text
