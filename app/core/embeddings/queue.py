"""The embedding queue: writes never wait on the model.

A write that needs a vector commits its text and a row of `embedding_queue` in the same
transaction (`app.core.embeddings.calls.enqueue`) and returns. Workers inside the server (`EmbeddingQueue.start`) then:

1. lease a batch of due rows for the active model in one short transaction
   (``FOR UPDATE SKIP LOCKED``: N workers or N replicas never take the same row; a lease that runs
   out, because its worker died, makes the row claimable again) and read the rows' current texts;
2. embed the texts with no transaction open;
3. in one more short transaction, delete the rows still at the version they leased and store those
   vectors (a row re-written meanwhile has a newer version: it stays queued and is embedded again).

The queue is fair between callers (issue 41, finding 5). Each row records who queued it (the
caller's key and project; '' for the start-up sweep and backfills). The lease splits a batch evenly
between keys, and a key's share between its projects, taking each one's oldest and newest due rows
(`app.core.embeddings.repository.FAIR_LEASE`), so a key's few rows are in the next batch behind any
other key's backlog; a batch is made caller by caller, the smallest first, each part stored at once
(`batch_parts`; a small part at the normal priority). A key whose waiting rows fit in one batch has
them made at once by the process that took the write (`EmbeddingQueue.embed_soon`), without waiting
for a worker busy with other keys' backlogs. A key with `embedding_max_pending_per_key` rows waiting
is refused further queue-backed writes (`app.core.embeddings.calls.enqueue`: 4290).

Background batches give way to the process's calls: while calls are in flight (or one ended less
than `QUIET_SECONDS` ago; `app.core.embeddings.load`), a worker holds back until a quiet moment, for at most
`embedding_queue_defer_seconds` counted from the oldest due row's enqueue time, so a burst of writes
is not slowed by the model running beside it on the same cores, and a steady load still gets its
vectors within that bound. Waits for a call's own rows and drains never hold back.

A failed batch (provider down) is released with an exponential delay per row, so writes keep
queueing and the vectors arrive once the provider answers; a text the provider refuses alone is
retried on its own without holding back its batch. The queue remembers the provider's failure (`Outage`:
the error, and since when) until a batch succeeds again, and `pending_report` tells a call that waits
on its vectors what fails and how many texts wait, for its reply. Vectors are stored per model: switching the model
queues every row lacking a vector for it (the start-up sweep of each server).

Features declare what they embed as `EmbeddingTarget`s (`app.core.embeddings.targets`); the core names
none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge

from app.core.embeddings.load import LOAD, Load
from app.core.embeddings.repository import EmbeddingQueueRepository, LeasedJob, QueueStats
from app.core.embeddings.targets import EmbeddingTarget

if TYPE_CHECKING:
    from app.core.config import Settings
    from app.core.db import Database
    from app.core.embeddings.provider import EmbeddingProvider

log = logging.getLogger("cairn.embedding_queue")

JOBS_DONE = Counter("cairn_embedding_jobs_done_total", "Queued rows whose vector was stored")
JOBS_RETRIED = Counter("cairn_embedding_jobs_retried_total", "Queued rows released for a later try after a failure")
JOBS_DEPTH = Gauge(
    "cairn_embedding_jobs_queued",
    "Rows waiting in the embedding queue for the active model",
    multiprocess_mode="livemostrecent",  # every worker reads the same shared queue
)
JOBS_OLDEST = Gauge(
    "cairn_embedding_jobs_oldest_seconds",
    "Age of the oldest row waiting in the embedding queue",
    multiprocess_mode="livemostrecent",
)

SWEEP_PAGE = 1000
# Light callers' rows embedded at once by this process (`EmbeddingQueue.embed_soon`), at most
SOON_TASKS = 4
# Callers whose rows in a batch are fewer than this are embedded together (`batch_parts`)
PART_ROWS = 8
# A gap between calls shorter than this is one client's think time, not a quiet moment.
QUIET_SECONDS = 0.05


@dataclass(frozen=True)
class BatchResult:
    """One batch: rows leased, and those the provider refused (job id -> (target, ref, error))."""

    leased: int
    failed: dict[int, tuple[str, str, str]]


@dataclass(frozen=True)
class WaitResult:
    """After a wait: the job ids still queued, and those the provider refused."""

    remaining: list[int]
    failed: dict[int, tuple[str, str, str]]


@dataclass(frozen=True)
class Outage:
    """The provider failed a whole batch: `error` is the last failure's message, `since` (UTC) the first
    failure after the last success."""

    error: str
    since: datetime


@dataclass(frozen=True)
class PendingReport:
    """Why a call's vectors still wait: the error (the call's own when it has one, else the provider's
    outage), since when the provider fails (None: it answers other texts), the texts of the model
    waiting and those that failed at their last try; `failed_rows` of the call's own rows, a sample of
    them in `failures` (job id -> (target, ref, error))."""

    error: str
    since: datetime | None
    waiting: int
    retrying: int
    failed_rows: int = 0
    failures: dict[int, tuple[str, str, str]] = field(default_factory=dict)


FAILURE_SAMPLE = 20


def batch_parts(jobs: Sequence[LeasedJob]) -> list[list[LeasedJob]]:
    """A leased batch in the parts it is made in: the rows of each caller (key and project), the
    smallest first, small callers together up to `PART_ROWS` rows (each part costs an embedding call
    and a transaction)."""
    groups: dict[tuple[str, str], list[LeasedJob]] = defaultdict(list)
    for job in jobs:
        groups[(job.owner, job.project)].append(job)
    parts: list[list[LeasedJob]] = []
    for group in sorted(groups.values(), key=len):
        if parts and len(parts[-1]) + len(group) <= PART_ROWS:
            parts[-1].extend(group)
        else:
            parts.append(list(group))
    return parts


class EmbeddingQueue:
    """The process's queue workers and the read-your-writes wait."""

    def __init__(
        self,
        db: Database,
        embedder: EmbeddingProvider,
        targets: Sequence[EmbeddingTarget],
        settings: Settings,
        load: Load = LOAD,
    ) -> None:
        self.db, self.embedder, self.settings, self.load = db, embedder, settings, load
        self.targets = {t.name: t for t in targets}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._soon: set[asyncio.Task[None]] = set()
        self._last_warning = 0.0
        self.outage: Outage | None = None

    @property
    def model(self) -> str:
        """The model whose vectors the workers make."""
        return self.embedder.model

    def busy(self) -> bool:
        """Whether this process is answering calls (one in flight, or one ended just now)."""
        return self.load.busy(QUIET_SECONDS)

    async def give_way(self) -> float:
        """Before a background batch: while the process is busy, wait for a quiet moment, at most
        until the oldest due row is `embedding_queue_defer_seconds` old. Returns the seconds waited."""
        defer = self.settings.embedding_queue_defer_seconds
        if defer <= 0 or not self.busy():
            return 0.0
        async with self.db.transaction(one_statement=True) as session:
            age = await EmbeddingQueueRepository(session).oldest_due_seconds(self.model)
        if age is None:
            return 0.0
        started = time.monotonic()
        until = started + max(0.0, defer - age)
        while True:  # polled: "quiet" is the absence of calls for a while, not an event
            left = until - time.monotonic()
            if left <= 0 or not self.busy():
                break
            await asyncio.sleep(min(QUIET_SECONDS, left))
        return time.monotonic() - started

    def wake(self) -> None:
        """Tell idle workers that rows were queued (other replicas find them by polling)."""
        self._wake.set()

    async def run_batch(self, ids: Sequence[int] | None = None, *, urgent: bool = False) -> BatchResult:
        """Lease, embed and store one batch (only `ids` when given: then a failure is reported in the
        result rather than raised). A worker's batch, which nobody waits on, embeds at the background
        priority; one that a caller waits for (`ids`, or `urgent` as in `drain`) at the normal one.

        The batch is made in parts (`batch_parts`: the rows of each key and project, the smallest first),
        each part's vectors stored as soon as they are made, so a key's few rows leased beside other
        keys' backlogs are searchable once their own texts are embedded, not the whole batch's; a part
        of at most `PART_ROWS` rows embeds at the normal priority. When a
        part fails, the first text is tried alone: if that fails too the provider is taken as down, the
        part is released for a later try, the parts not yet made are given back, and the error is
        raised; otherwise each text is tried on its own, so one text the provider refuses never holds
        back the others."""
        s = self.settings
        # On the driver: an idle worker runs this every poll, and its statements are all text.
        async with self.db.transaction(plain=True) as session:
            repo = EmbeddingQueueRepository(session)
            jobs = await repo.lease(
                self.model, s.embedding_queue_batch, s.embedding_queue_lease_seconds, list(self.targets), ids
            )
            if not jobs:
                return BatchResult(0, {})
            texts: dict[str, dict[str, str]] = {}
            by_target: dict[str, list[LeasedJob]] = defaultdict(list)
            for job in jobs:
                by_target[job.target].append(job)
            for name, group in by_target.items():
                texts[name] = await self.targets[name].texts(session, [j.ref for j in group])
        parts = batch_parts(jobs)
        failed: dict[int, tuple[str, str, str]] = {}
        for n, part in enumerate(parts):
            try:
                # A small part (callers with few rows in the batch) runs at the normal priority: it
                # must not wait behind another worker's backlog on the one background thread. The
                # provider still sends more than a batch's worth of tokens to the background.
                failed.update(await self._make(part, texts, ids, urgent or len(part) <= PART_ROWS))
            except BaseException:
                rest = [j for later in parts[n + 1 :] for j in later]
                if rest:  # not tried: due again at once, with no error
                    with contextlib.suppress(Exception):
                        async with self.db.transaction() as session:
                            await EmbeddingQueueRepository(session).release(rest)
                raise
        return BatchResult(len(jobs), failed)

    async def _make(
        self, jobs: list[LeasedJob], texts: Mapping[str, Mapping[str, str]], ids: Sequence[int] | None, urgent: bool
    ) -> dict[int, tuple[str, str, str]]:
        """Embed and store the vectors of leased `jobs` (a part of a batch, see `run_batch`); returns
        the jobs the provider refused (job id -> (target, ref, error))."""
        s = self.settings
        todo = [(j, texts[j.target][j.ref]) for j in jobs if j.ref in texts[j.target]]
        made: dict[int, list[float]] = {}
        failed: dict[int, tuple[LeasedJob, str]] = {}
        try:
            try:
                embed = self.embedder.embed if ids is not None or urgent else self.embedder.embed_background
                vectors = await embed([t for _, t in todo]) if todo else []
                made = {j.id: v for (j, _), v in zip(todo, vectors, strict=True)}
            except Exception as exc:
                if len(todo) < 2:
                    raise
                made, failed = await self._one_by_one(todo, exc)
        except BaseException as exc:
            cancelled = isinstance(exc, asyncio.CancelledError)  # shutting down: release at once, no delay
            error = "cancelled" if cancelled else f"{type(exc).__name__}: {exc}"
            if not cancelled:
                JOBS_RETRIED.inc(len(jobs))
                # One text alone cannot tell a refused text from a provider that is down: ask the provider.
                if len(todo) > 1 or not await self._provider_answers():
                    self._provider_failed(error)
            with contextlib.suppress(Exception):
                async with self.db.transaction() as session:
                    repo = EmbeddingQueueRepository(session)
                    if cancelled:  # not a failure: the rows are due again at once, with no error
                        await repo.release(jobs)
                    else:
                        await repo.retry_later(jobs, error, s.embedding_queue_retry_max_seconds)
            if ids is None or cancelled or not isinstance(exc, Exception):
                raise
            # A caller waiting for its own rows learns which ones failed instead of an exception.
            return {j.id: (j.target, j.ref, error) for j in jobs}
        async with self.db.transaction(plain=True) as session:
            repo = EmbeddingQueueRepository(session)
            for job, error in failed.values():
                await repo.retry_later([job], error, s.embedding_queue_retry_max_seconds)
            done = await repo.complete([j for j in jobs if j.id not in failed])
            stored: dict[str, list[tuple[str, list[float]]]] = defaultdict(list)
            for job in jobs:
                if job.id in done and job.id in made:
                    stored[job.target].append((job.ref, made[job.id]))
            for name, items in stored.items():
                await self.targets[name].store(session, self.model, items)
        JOBS_DONE.inc(sum(len(v) for v in stored.values()))
        JOBS_RETRIED.inc(len(failed))
        if made:
            self.outage = None  # the provider answers again
        if log.isEnabledFor(logging.DEBUG):  # what each process embedded: N workers never share a job
            log.debug("embedded a batch", extra={"model": self.model, "jobs": sorted(made), "worker_pid": os.getpid()})
        return {i: (j.target, j.ref, e) for i, (j, e) in failed.items()}

    async def _one_by_one(
        self, todo: list[tuple[LeasedJob, str]], first_error: Exception
    ) -> tuple[dict[int, list[float]], dict[int, tuple[LeasedJob, str]]]:
        """Embed each text alone after a failed batch; raises when the first one fails too (the
        provider is down, not one text refused)."""
        made: dict[int, list[float]] = {}
        failed: dict[int, tuple[LeasedJob, str]] = {}
        for n, (job, text) in enumerate(todo):
            try:
                made[job.id] = (await self.embedder.embed([text]))[0]
            except Exception as exc:
                if n == 0:
                    raise first_error from exc
                failed[job.id] = (job, f"{type(exc).__name__}: {exc}")
        if not made:
            raise first_error
        return made, failed

    async def wait(self, ids: Sequence[int], timeout: float) -> WaitResult:
        """Make the vectors of `ids` now (or wait for the worker that holds them) for at most
        `timeout` seconds; returns those still queued and those the provider refused. Never raises:
        a failure leaves the rows queued for the workers."""
        deadline = time.monotonic() + timeout
        remaining = list(ids)
        failed: dict[int, tuple[str, str, str]] = {}
        try:
            while remaining:
                batch = await asyncio.wait_for(self.run_batch(remaining), max(0.001, deadline - time.monotonic()))
                failed.update(batch.failed)
                async with self.db.transaction() as session:
                    remaining = await EmbeddingQueueRepository(session).remaining(remaining)
                if not remaining or failed or time.monotonic() >= deadline:
                    break
                if not batch.leased and self.outage is not None:
                    break  # the rows wait out a retry delay and the provider is down: no use waiting
                await asyncio.sleep(0.01)  # another worker holds them
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info("waiting for embeddings gave up: %s: %s", type(exc).__name__, exc)
        return WaitResult(remaining=remaining, failed=failed)

    def embed_soon(self, ids: Sequence[int]) -> bool:
        """Make the vectors of a light caller's rows (`ids`: a call of a key with few rows waiting) in a
        task of this process, as a worker would (giving way first) but without waiting for a free worker
        nor at the background priority: a worker's batch of another key's backlog may take long on a busy
        host. At most `SOON_TASKS` at once, and none when this process runs no workers; False when the
        rows are left to the workers."""
        if not self.settings.embedding_queue_workers or len(self._soon) >= SOON_TASKS or not ids:
            return False

        async def soon() -> None:
            try:
                await self.give_way()
                await self.run_batch(ids)  # rows a worker holds already are left to it
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the rows stay queued for the workers
                self._warn("embedding a light caller's rows", exc)

        task = asyncio.get_running_loop().create_task(soon(), name="cairn-embedding-soon")
        self._soon.add(task)
        task.add_done_callback(self._soon.discard)
        return True

    async def _provider_answers(self) -> bool:
        """Whether the provider passes its readiness check (a remote one answered within its check
        interval, or answers a probe now)."""
        try:
            await self.embedder.check()
        except Exception:
            return False
        return True

    def _provider_failed(self, error: str) -> None:
        since = self.outage.since if self.outage is not None else datetime.now(UTC)
        self.outage = Outage(error[:500], since)

    async def pending_report(
        self, ids: Sequence[int], own: Mapping[int, tuple[str, str, str]] | None = None
    ) -> PendingReport | None:
        """Why the vectors of `ids` (a call's rows, still queued) wait, or None when nothing fails:
        neither the provider (`outage`, with rows of the model that failed their last try) nor the call's
        own rows (`own`: the failures its wait saw, and its rows queued after a failed try). Reads the
        database only when something failed."""
        own = dict(own or {})
        outage = self.outage
        if outage is None and not own:
            return None
        async with self.db.transaction() as session:
            repo = EmbeddingQueueRepository(session)
            stats = await repo.stats(self.model)
            total, rows = await repo.failures(ids, FAILURE_SAMPLE)
        failures = {**own, **rows}
        if not failures and (outage is None or not stats.retrying):
            return None
        error = next(iter(failures.values()))[2] if failures else outage.error if outage else ""
        return PendingReport(
            error=error[:300],
            since=outage.since if outage is not None else None,
            waiting=stats.depth,
            retrying=stats.retrying,
            failed_rows=max(total, len(failures)),
            failures=dict(list(failures.items())[:FAILURE_SAMPLE]),
        )

    async def drain(self, timeout: float) -> QueueStats:
        """Help the workers until the queue of the active model is empty or `timeout` passes (the
        batch in hand is finished, not cut off: a cut batch would embed its texts for nothing)."""
        deadline = time.monotonic() + timeout
        while True:
            stats = await self.stats()
            if stats.depth == 0 or time.monotonic() >= deadline:
                return stats
            try:
                leased = (await self.run_batch(urgent=True)).leased
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._warn("draining the embedding queue", exc)
                leased = 0
            if not leased:
                await asyncio.sleep(0.05)

    async def stats(self) -> QueueStats:
        """Depth and age of the queue for the active model (also set as metrics)."""
        async with self.db.transaction() as session:
            stats = await EmbeddingQueueRepository(session).stats(self.model)
        JOBS_DEPTH.set(stats.depth)
        JOBS_OLDEST.set(stats.oldest_seconds or 0.0)
        return stats

    async def sweep(self, limit: int | None = None) -> int:
        """Queue every row of every target that lacks a vector of the active model (at most `limit`);
        returns how many rows it queued. Rows queued for other models stay: another server on the
        same database may run that model."""
        queued = 0
        for target in self.targets.values():
            while limit is None or queued < limit:
                page = SWEEP_PAGE if limit is None else min(SWEEP_PAGE, limit - queued)
                async with self.db.transaction() as session:
                    refs = await target.missing(session, self.model, page)
                    await EmbeddingQueueRepository(session).enqueue(target.name, refs, self.model, bump=False)
                queued += len(refs)
                if len(refs) < page:
                    break
        if queued:
            log.info("queued %d rows lacking a vector of %s", queued, self.model)
            self.wake()
        return queued

    async def _work(self) -> None:
        failures = 0
        while True:
            try:
                await self.give_way()
                leased = (await self.run_batch()).leased
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                self._warn("embedding queue batch failed; retrying later", exc)
                await asyncio.sleep(min(self.settings.embedding_queue_retry_max_seconds, 0.25 * 2**failures))
                continue
            if not leased:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.settings.embedding_queue_poll_seconds)

    async def _start(self) -> None:
        try:
            await self.sweep()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._warn("the start-up sweep of the embedding queue failed", exc)
        await self._work()

    def start(self) -> None:
        """Start the sweep and the workers as tasks of the running loop (never blocks start-up)."""
        if self._tasks:
            return
        loop = asyncio.get_running_loop()
        workers = self.settings.embedding_queue_workers
        if workers:
            self._tasks.append(loop.create_task(self._start(), name="cairn-embedding-queue-0"))
        for i in range(1, workers):
            self._tasks.append(loop.create_task(self._work(), name=f"cairn-embedding-queue-{i}"))

    async def stop(self) -> None:
        """Cancel the workers; rows they held are leased until their lease runs out, then retried."""
        tasks: list[asyncio.Task[Any]] = [*self._tasks, *self._soon]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    def _warn(self, what: str, exc: BaseException) -> None:
        # One line per 30 s while the provider is down, not one per batch.
        now = time.monotonic()
        if now - self._last_warning >= 30:
            self._last_warning = now
            log.warning("%s: %s: %s", what, type(exc).__name__, str(exc)[:200])
