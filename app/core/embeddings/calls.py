"""What an operation call does with the embedding machinery: queue the vectors of its writes, and
embed a search's query.

`enqueue` writes queue rows in the call's transaction, as the caller's (its key and project, which
the fair lease goes by), refuses a key that has `embedding_max_pending_per_key` rows waiting already
(4290: a write counts by the rows it queues), and registers, once per call, the after-commit
hook `QueuedVectors` (`CallContext.after_commit`): once the call has committed, it wakes the queue's
workers, waits for the call's own rows when asked (the call's `wait_for_embedding`, else the server's
`embedding_write_mode`), and reports `embedding` ("done" or "pending") in a reply that has that
field. While the provider fails (or refused some of the call's texts), `embedding` is instead an
`EmbeddingPending` object naming the error, since when, and how many texts wait; a reply that states
its `tokens` is measured again. The executor runs the hook as it runs any other and names no queue.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cachetools import TTLCache
from pydantic import BaseModel

from app.core import budget
from app.core.context import CallContext
from app.core.embeddings.provider import EmbeddingUnavailable
from app.core.embeddings.queue import PendingReport, WaitResult
from app.core.embeddings.repository import EmbeddingQueueRepository
from app.core.errors import RateLimited
from app.core.schemas import EmbeddingPending, EmbeddingState

__all__ = ["BacklogMemo", "QueuedVectors", "enqueue", "over_pending_cap", "pending_state", "query_vector"]

log = logging.getLogger("cairn.embeddings")

# What a key over its cap of waiting rows is told to wait before it writes again
PENDING_RETRY_SECONDS = 5


class BacklogMemo:
    """Per server: each key's rows waiting in the queue as this process last counted them, plus the
    rows it queued for the key since, kept `ttl` seconds from the count.

    Counting a key's waiting rows reads them all (up to the cap), so a bulk writer whose backlog grows
    would pay more for each write than for the last. While a key's rows, so remembered, are more than
    a batch (the write is not light) and under half the cap, `enqueue` skips the count: the rows other
    processes queue for the key within `ttl` are all it can miss, and those would have to number half
    the cap to carry the key past it. Near the cap, or once `ttl` has passed, every write counts."""

    def __init__(self, ttl: float = 1.0, maxsize: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        # The value is a one-item list, added to in place: that keeps the entry's expiry at its count.
        self._known: TTLCache[tuple[str, str], list[int]] = TTLCache(maxsize=maxsize, ttl=ttl, timer=clock)

    def rows(self, model: str, owner: str) -> int | None:
        """The key's waiting rows as last counted plus those queued here since (None: not counted lately)."""
        found = self._known.get((model, owner))
        return None if found is None else found[0]

    def counted(self, model: str, owner: str, rows: int) -> None:
        """The key has `rows` waiting now (counted, plus this write's)."""
        self._known[(model, owner)] = [rows]

    def queued(self, model: str, owner: str, rows: int) -> None:
        """This process queued `rows` more for the key."""
        found = self._known.get((model, owner))
        if found is not None:
            found[0] += rows

    @classmethod
    def of(cls, extras: dict[str, Any]) -> BacklogMemo:
        """The server's memo (kept in `AppState.extras`)."""
        memo = extras.get("embedding_backlog")
        if not isinstance(memo, cls):
            memo = extras["embedding_backlog"] = cls()
        return memo


@dataclass(eq=False)
class QueuedVectors:
    """The queue rows one call wrote, and after its commit what became of them (`waited`: None unless
    the call waited). Registered as the call's after-commit hook by `of`."""

    ctx: CallContext
    ids: list[int] = field(default_factory=list)
    # Whether the caller's key had few rows waiting, these included (`enqueue`): then, unless the call
    # waits, this process makes them at once (`EmbeddingQueue.embed_soon`) rather than the workers
    light: bool | None = None
    waited: WaitResult | None = None
    # Set when the vectors wait because something failed: why (None: nothing failed)
    pending: PendingReport | None = None

    @classmethod
    def of(cls, ctx: CallContext) -> QueuedVectors:
        """The call's queued rows, registered as its after-commit hook on first use (a hook registered
        after this one sees `waited` already set)."""
        found = cls.find(ctx)
        if found is None:
            found = cls(ctx)
            ctx.after_commit(found)
        return found

    @classmethod
    def find(cls, ctx: CallContext) -> QueuedVectors | None:
        """The call's queued rows, or None when it queued none (nothing is registered)."""
        return next((hook for hook in ctx.commit_hooks if isinstance(hook, cls)), None)

    def wants_wait(self) -> bool:
        """Whether the call waits for its vectors: its own `wait_for_embedding`, else the write mode."""
        wait = getattr(self.ctx.args, "wait_for_embedding", None)
        return self.ctx.settings.embedding_write_mode == "sync" if wait is None else bool(wait)

    async def __call__(self, result: Any) -> Any:
        """After the commit: wake the workers, wait for these rows when asked, report `embedding`."""
        if not self.ids:
            return result
        queue, done = self.ctx.app.queue, False
        if queue is not None:
            queue.wake()
            if self.wants_wait():
                self.waited = await queue.wait(self.ids, self.ctx.settings.embedding_wait_seconds)
                done = not self.waited.remaining
            elif self.light:
                queue.embed_soon(self.ids)
            if not done:
                try:
                    self.pending = await queue.pending_report(self.ids, self.waited.failed if self.waited else None)
                except Exception as exc:  # the reply still goes out, saying "pending"
                    log.warning("could not read why the vectors wait: %s: %s", type(exc).__name__, exc)
        fields = type(result).model_fields if isinstance(result, BaseModel) else {}
        if isinstance(result, BaseModel) and "embedding" in fields:
            state: EmbeddingState = "done" if done else pending_state(self.pending) or "pending"
            result = result.model_copy(update={"embedding": state})
            stated: int = getattr(result, "tokens", 0) if "tokens" in fields else 0
            if isinstance(state, EmbeddingPending) and stated:  # the reply states its size: say it again
                result = budget.measured(result, "tokens")
        return result


def pending_state(report: PendingReport | None) -> EmbeddingPending | None:
    """The `embedding` of a reply whose vectors wait because something failed (None: nothing failed)."""
    if report is None:
        return None
    return EmbeddingPending(
        provider_error=report.error,
        failing_since=report.since,
        waiting=report.waiting,
        failed=report.retrying,
    )


async def enqueue(ctx: CallContext, target: str, refs: Sequence[Any]) -> list[int]:
    """Queue the vectors of `refs` of `target` for the active model, in the call's transaction; returns
    the queue's row ids.

    The rows are the caller's (its key and project: the workers lease fairly between callers), and a
    key with `embedding_max_pending_per_key` rows waiting already is refused (`RateLimited`) before
    anything is queued: a write counts by the rows it queues, not as one call. The CLI's own work is
    not capped. After the commit the workers are woken and, when the call asks for it (or the server
    runs in `sync` write mode), the call waits for these rows before answering (`QueuedVectors`); a
    key whose waiting rows fit in one batch (`embedding_queue_batch`) while other keys' backlog fills
    a batch has them made at once by this process instead of in turn behind that backlog.

    A key's waiting rows are counted at most once a second while they are more than a batch and under
    half the cap (`BacklogMemo`)."""
    repo = EmbeddingQueueRepository(ctx.session)
    owner, model, settings = ctx.caller_key, ctx.embedder.model, ctx.settings
    cap, light = settings.embedding_max_pending_per_key, settings.embedding_queue_batch
    backlog = None
    counts = bool(refs) and ctx.transport != "cli"
    memo = BacklogMemo.of(ctx.app.extras)
    known = memo.rows(model, owner) if counts else None
    remembered = known is not None and known > light and (cap <= 0 or known + len(refs) < cap // 2)
    if counts and not remembered:
        backlog = await repo.backlog_of(model, owner, max(cap, light + 1), light)
        if cap > 0 and backlog.mine >= cap:
            raise over_pending_cap(cap)
    ids = await repo.enqueue(target, [str(r) for r in refs], model, owner=owner, project=ctx.acting_project or "")
    hook = QueuedVectors.of(ctx)
    hook.ids.extend(ids)
    if remembered:  # more than a batch waits: not light
        memo.queued(model, owner, len(ids))
        hook.light = False
    if backlog is not None:
        memo.counted(model, owner, backlog.mine + len(ids))
        # Light: the key's rows waiting, these included, fit in one batch, behind at least a batch of
        # other callers' rows. A key alone in the queue (one client loading in bulk) leaves its rows to
        # the workers, which hold back while calls stream in.
        light_now = backlog.mine + len(ids) <= light and backlog.others >= light
        hook.light = hook.light is not False and light_now
    return ids


def over_pending_cap(cap: int) -> RateLimited:
    """The refusal of a write by a key that has `cap` rows waiting for their vectors already."""
    return RateLimited(
        f"This API key has {cap} texts waiting for their vectors; writes that add more must wait",
        suggestions=[f"Retry after {PENDING_RETRY_SECONDS} s, once the queue has made some of them"],
        details={"retry_after": PENDING_RETRY_SECONDS, "pending_cap": cap},
        headers={"Retry-After": str(PENDING_RETRY_SECONDS)},
    )


async def query_vector(ctx: CallContext, text: str, purpose: str) -> list[float] | None:
    """The vector of a search's query `text`, or None when the model is unavailable: the search then
    ranks by text alone, and `purpose` (e.g. "graph search") names it in the warning logged.

    Call it before any SQL of the call, so that no transaction is open while the model runs."""
    try:
        return await ctx.embedder.embed_one(text)
    except EmbeddingUnavailable as exc:
        log.warning("%s without vectors: %s", purpose, exc)
        return None
