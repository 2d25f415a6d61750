"""app/core/embeddings/calls.py: a call's queued vectors as its after-commit hook (wake, wait when asked,
report `embedding`), and the query vector of a search."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from pydantic import BaseModel

from app.core import budget
from app.core.config import Settings
from app.core.context import OPEN_PRINCIPAL, AppState, CallContext, Principal
from app.core.embeddings.calls import BacklogMemo, QueuedVectors, enqueue, query_vector
from app.core.embeddings.provider import EmbeddingUnavailable
from app.core.embeddings.queue import PendingReport, WaitResult
from app.core.errors import RateLimited
from app.core.executor import run_commit_hooks
from app.core.registry import Registry
from app.core.schemas import EmbeddingPending, EmbeddingState


class Reply(BaseModel):
    id: str = "x"
    embedding: str | EmbeddingPending = "pending"


class Sized(BaseModel):
    """A reply that states its own size, as the summary replies do."""

    summary: str = "a summary"
    embedding: EmbeddingState = "done"
    tokens: int = 0


class Plain(BaseModel):
    id: str = "x"


class FakeQueue:
    """Records wakes and waits; a wait leaves `remaining` of the ids queued."""

    def __init__(self, remaining: int = 0, report: PendingReport | None = None) -> None:
        self.remaining = remaining
        self.report = report
        self.woken = 0
        self.soon: list[list[int]] = []
        self.waits: list[tuple[list[int], float]] = []
        self.asked: list[tuple[list[int], dict[int, tuple[str, str, str]] | None]] = []

    def wake(self) -> None:
        self.woken += 1

    def embed_soon(self, ids: Sequence[int]) -> bool:
        self.soon.append(list(ids))
        return True

    async def wait(self, ids: Sequence[int], timeout: float) -> WaitResult:
        self.waits.append((list(ids), timeout))
        return WaitResult(remaining=list(ids)[: self.remaining], failed={})

    async def pending_report(
        self, ids: Sequence[int], own: dict[int, tuple[str, str, str]] | None = None
    ) -> PendingReport | None:
        self.asked.append((list(ids), own))
        return self.report


class FakeEmbedder:
    model = "m"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    async def embed_one(self, text: str) -> list[float]:
        if self.fail:
            raise EmbeddingUnavailable("down")
        return [float(len(text))]


class FakeResult:
    def __init__(self, ids: list[int], count: int = 0, row: dict[str, int] | None = None) -> None:
        self.ids = ids
        self.count = count
        self.row = row

    def mappings(self) -> FakeResult:
        return self

    def first(self) -> dict[str, int] | None:
        return self.row

    def scalar(self) -> int:
        return self.count

    def scalars(self) -> FakeResult:
        return self

    def all(self) -> list[int]:
        return self.ids


class FakeSession:
    """Answers each INSERT into the queue with the next ids, and a count of waiting rows with `pending`
    rows of the key and `others` of other keys (each up to its bound); records the parameters of each."""

    def __init__(self, pending: int = 0, others: int = 0) -> None:
        self.next = 1
        self.pending = pending
        self.others = others
        self.params: list[dict[str, Any]] = []

    async def execute(self, statement: Any, params: Any = None) -> FakeResult:
        self.params.append(dict(params))
        if "cap" in params:
            mine = min(self.pending, params["cap"])
            others = min(self.others, params["light"]) if mine <= params["light"] else 0
            return FakeResult([], row={"mine": mine, "others": others})
        ids = list(range(self.next, self.next + len(params["refs"])))
        self.next += len(ids)
        return FakeResult(ids)


def context(
    queue: FakeQueue | None,
    *,
    mode: str = "async",
    args: BaseModel | None = None,
    embedder: FakeEmbedder | None = None,
    pending: int = 0,
    others: int = 0,
    cap: int = 5000,
    transport: str = "test",
    principal: Principal = OPEN_PRINCIPAL,
) -> CallContext:
    settings = Settings(
        embedding_write_mode=mode,  # type: ignore[arg-type]
        embedding_wait_seconds=3.0,
        embedding_max_pending_per_key=cap,
    )
    app = AppState(
        settings=settings,
        db=cast(Any, None),
        embedder=cast(Any, embedder or FakeEmbedder()),
        registry=Registry(),
        queue=cast(Any, queue),
    )
    return CallContext(
        session=cast(Any, FakeSession(pending, others)),
        principal=principal,
        app=app,
        request_id="r",
        transport=transport,
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


DOWN = PendingReport(
    error="EmbeddingUnavailable: openai embeddings at http://127.0.0.1:9/v1/embeddings: ConnectError",
    since=datetime(2026, 11, 27, 15, 0, tzinfo=UTC),
    waiting=12,
    retrying=10,
)


async def test_a_reply_names_the_provider_failure_while_its_vectors_wait() -> None:
    queue = FakeQueue(report=DOWN)
    ctx = context(queue)
    await enqueue(ctx, "notes", ["a", "b"])
    reply = await run_commit_hooks(ctx, Reply())
    assert reply.embedding == EmbeddingPending(
        provider_error=DOWN.error, failing_since=DOWN.since, waiting=12, failed=10
    )
    assert queue.asked == [([1, 2], None)]  # no wait: nothing of its own failed
    assert reply.model_dump(mode="json")["embedding"] == {
        "status": "pending",
        "provider_error": DOWN.error,
        "failing_since": "2026-11-27T15:00:00Z",
        "waiting": 12,
        "failed": 10,
    }
    queued = QueuedVectors.find(ctx)
    assert queued is not None and queued.pending is DOWN  # later hooks (the backfill's) read it


async def test_a_text_refused_alone_names_no_outage_and_a_healthy_queue_adds_nothing() -> None:
    refused = PendingReport(error="EmbeddingUnavailable: HTTP 500 refused", since=None, waiting=1, retrying=1)
    ctx = context(FakeQueue(report=refused))
    await enqueue(ctx, "notes", ["a"])
    sent = (await run_commit_hooks(ctx, Reply())).model_dump(mode="json")["embedding"]
    assert "failing_since" not in sent and sent["provider_error"].endswith("refused")
    ctx = context(FakeQueue(report=None))
    await enqueue(ctx, "notes", ["a"])
    assert (await run_commit_hooks(ctx, Reply())).embedding == "pending"


async def test_a_reply_that_states_its_tokens_is_measured_again_with_the_failure() -> None:
    ctx = context(FakeQueue(report=DOWN))
    await enqueue(ctx, "notes", ["a"])
    before = budget.measured(Sized(), "tokens")
    after = await run_commit_hooks(ctx, before)
    assert after.tokens > before.tokens
    sent = budget.tokens_of(after.model_dump(mode="json"))
    assert after.tokens in (sent, sent - 1)


async def test_a_report_that_cannot_be_read_still_answers_pending(caplog: pytest.LogCaptureFixture) -> None:
    queue = FakeQueue()

    async def broken(ids: Sequence[int], own: object = None) -> PendingReport | None:
        raise ConnectionError("database gone")

    queue.pending_report = broken  # type: ignore[method-assign]
    ctx = context(queue)
    await enqueue(ctx, "notes", ["a"])
    with caplog.at_level(logging.WARNING, logger="cairn.embeddings"):
        assert (await run_commit_hooks(ctx, Reply())).embedding == "pending"
    assert "could not read why the vectors wait" in caplog.text


async def test_query_vector_is_none_when_the_model_is_unavailable(caplog: pytest.LogCaptureFixture) -> None:
    assert await query_vector(context(None), "four", "notes search") == [4.0]
    with caplog.at_level(logging.WARNING, logger="cairn.embeddings"):
        assert await query_vector(context(None, embedder=FakeEmbedder(fail=True)), "q", "notes search") is None
    assert "notes search without vectors: down" in caplog.text


async def test_queued_rows_are_the_callers_key_and_project() -> None:
    key = Principal(key_id="k1", name="writer", scopes=frozenset({"write"}))
    ctx = context(FakeQueue(), principal=key)
    assert ctx.project("notes") == "notes"
    await enqueue(ctx, "notes", ["a"])
    session = cast(FakeSession, ctx.session)
    count, insert = session.params
    assert count["owner"] == insert["owner"] == "k1" and insert["project"] == "notes"
    open_ctx = context(FakeQueue())  # an open server's callers are one: the rate limiter's
    await enqueue(open_ctx, "notes", ["a"])
    assert cast(FakeSession, open_ctx.session).params[-1]["owner"] == "open-mode"


async def test_a_key_with_its_cap_of_rows_waiting_is_refused_before_anything_is_queued() -> None:
    ctx = context(FakeQueue(), pending=5000, cap=5000)
    with pytest.raises(RateLimited) as refused:
        await enqueue(ctx, "notes", ["a", "b"])
    err = refused.value
    assert err.code == 4290 and err.status == 429 and err.headers["Retry-After"] == "5"
    assert (err.details or {})["pending_cap"] == 5000
    assert [p for p in cast(FakeSession, ctx.session).params if "refs" in p] == []
    assert QueuedVectors.find(ctx) is None
    # Under the cap a write queues all its rows, however many (the cap counts rows already waiting).
    under = context(FakeQueue(), pending=4999, cap=5000)
    assert len(await enqueue(under, "notes", [str(i) for i in range(300)])) == 300


@pytest.mark.parametrize(("cap", "transport"), [(0, "rest"), (5000, "cli")])
async def test_no_cap_when_it_is_off_or_for_the_clis_own_work(cap: int, transport: str) -> None:
    ctx = context(FakeQueue(), pending=10**6, cap=cap, transport=transport)
    assert await enqueue(ctx, "notes", ["a"]) == [1]
    counted = [p for p in cast(FakeSession, ctx.session).params if "cap" in p]
    assert len(counted) == (0 if transport == "cli" else 1)  # counted only to tell a light caller


@pytest.mark.parametrize(
    ("pending", "others", "refs", "wait", "soon"),
    [
        (0, 500, 3, None, True),  # a key with few rows waiting behind a backlog: made at once here
        (60, 64, 4, None, True),  # 64 of its own: still one batch, behind a full batch of others'
        (61, 500, 4, None, False),  # over one batch: in turn, by the workers
        (0, 63, 3, None, False),  # less than a batch of others' rows waiting: the workers are near
        (0, 0, 25, None, False),  # a key alone in the queue (a bulk load): the workers, which hold back
        (0, 500, 3, True, False),  # the call waits for its rows itself
    ],
)
async def test_a_light_callers_rows_are_made_at_once_unless_it_waits(
    pending: int, others: int, refs: int, wait: bool | None, soon: bool
) -> None:
    queue = FakeQueue()
    ctx = context(queue, pending=pending, others=others, args=WriteIn(wait_for_embedding=wait))
    ids = await enqueue(ctx, "notes", [str(i) for i in range(refs)])
    await run_commit_hooks(ctx, Reply())
    assert queue.soon == ([ids] if soon else [])


def counts_of(ctx: CallContext) -> int:
    return len([p for p in cast(FakeSession, ctx.session).params if "cap" in p])


async def test_a_bulk_writers_rows_are_counted_at_most_once_a_second_while_under_half_the_cap() -> None:
    now = [0.0]
    memo = BacklogMemo(ttl=1.0, clock=lambda: now[0])
    # One server (its memo), each call its own session: 100 of the key's rows wait at first.
    app_extras: dict[str, Any] = {"embedding_backlog": memo}

    def call(pending: int, cap: int = 1000) -> CallContext:
        ctx = context(FakeQueue(), pending=pending, cap=cap)
        ctx.app.extras = app_extras
        return ctx

    first = call(100)
    await enqueue(first, "notes", [str(i) for i in range(25)])
    assert counts_of(first) == 1 and memo.rows("m", "open-mode") == 125
    second = call(125)
    await enqueue(second, "notes", [str(i) for i in range(25)])
    assert counts_of(second) == 0 and memo.rows("m", "open-mode") == 150
    assert QueuedVectors.find(second).light is False  # type: ignore[union-attr]
    now[0] = 1.01  # a second on: counted again (the workers may have made some)
    third = call(40)
    await enqueue(third, "notes", [str(i) for i in range(25)])
    assert counts_of(third) == 1 and memo.rows("m", "open-mode") == 65
    # Near half the cap every write counts, and the cap refuses as before.
    memo.counted("m", "open-mode", 480)
    near = call(480)
    await enqueue(near, "notes", [str(i) for i in range(25)])
    assert counts_of(near) == 1
    memo.counted("m", "open-mode", 990)
    with pytest.raises(RateLimited):
        await enqueue(call(1000), "notes", ["a"])


async def test_a_light_key_is_counted_on_every_write() -> None:
    memo = BacklogMemo()
    for _ in range(3):
        ctx = context(FakeQueue(), pending=10, others=500)
        ctx.app.extras = {"embedding_backlog": memo}
        await enqueue(ctx, "notes", ["a"])
        assert counts_of(ctx) == 1  # at most a batch waits: whether it is light is read each time
