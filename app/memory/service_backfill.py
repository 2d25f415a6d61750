"""Embedding backfill (seed 004): give memories that lack a vector of the active model one.

Best effort: batches are embedded with bounded concurrency, each batch is written in a savepoint
with `ON CONFLICT (memory_id, model) DO UPDATE`, one failing item never aborts the run, and
cancellation stops the work between batches.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.core.embedding import EmbeddingProvider
from app.memory.repository import MemoryRepository

log = logging.getLogger("cairn.memory.backfill")

MAX_REPORTED_FAILURES = 20
SAMPLE_IDS = 10
Progress = Callable[[int, int], Awaitable[None]]


@dataclass
class BackfillReport:
    """Counts of one backfill run."""

    model: str
    scanned: int = 0
    embedded: int = 0
    skipped: int = 0
    failed: int = 0
    dry_run: bool = False
    failures: list[dict[str, str]] = field(default_factory=list)
    sample_ids: list[str] = field(default_factory=list)
    cursor: tuple[datetime, uuid.UUID] | None = None

    def fail(self, memory_id: Any, exc: BaseException | str) -> None:
        """Count one failure (details of the first few are reported)."""
        self.failed += 1
        message = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        log.warning("backfill failed for %s: %s", memory_id, message)
        if len(self.failures) < MAX_REPORTED_FAILURES:
            self.failures.append({"id": str(memory_id), "error": message[:200]})

    def public(self) -> dict[str, Any]:
        """The seed's output shape."""
        return {
            "model": self.model,
            "scanned": self.scanned,
            "embedded": self.embedded,
            "skipped": self.skipped,
            "failed": self.failed,
            "dry_run": self.dry_run,
            "failures": self.failures,
            "sample_ids": self.sample_ids,
        }


async def _embed_batch(
    embedder: EmbeddingProvider, rows: list[dict[str, Any]], report: BackfillReport
) -> list[tuple[uuid.UUID, list[float]]]:
    texts = [r["content"] for r in rows]
    try:
        vectors = await embedder.embed(texts)
        return [(r["id"], v) for r, v in zip(rows, vectors, strict=True)]
    except asyncio.CancelledError:
        raise
    except Exception:
        out = []
        for row in rows:  # isolate the failing items
            try:
                out.append((row["id"], (await embedder.embed([row["content"]]))[0]))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                report.fail(row["id"], exc)
        return out


async def _limited(
    semaphore: asyncio.Semaphore, embedder: EmbeddingProvider, rows: list[dict[str, Any]], report: BackfillReport
) -> list[tuple[uuid.UUID, list[float]]]:
    async with semaphore:
        return await _embed_batch(embedder, rows, report)


async def _write(
    session: AsyncSession, model: str, items: list[tuple[uuid.UUID, list[float]]], report: BackfillReport
) -> None:
    repo = MemoryRepository(session)
    try:
        async with session.begin_nested():
            await repo.upsert_embeddings(model, items)
        report.embedded += len(items)
        return
    except Exception:
        log.warning("backfill batch write failed; retrying item by item", exc_info=True)
    for mid, vector in items:
        try:
            async with session.begin_nested():
                await repo.upsert_embeddings(model, [(mid, vector)])
            report.embedded += 1
        except Exception as exc:
            report.fail(mid, exc)


async def backfill(
    session: AsyncSession,
    embedder: EmbeddingProvider,
    *,
    project_id: uuid.UUID | None,
    limit: int,
    batch_size: int,
    include_archived: bool = False,
    older_than_days: int = 0,
    dry_run: bool = False,
    concurrency: int = 4,
    progress: Progress | None = None,
    after: tuple[datetime, uuid.UUID] | None = None,
) -> BackfillReport:
    """Embed up to `limit` memories lacking a vector of the active model, oldest first."""
    model = embedder.model
    repo = MemoryRepository(session)
    report = BackfillReport(model=model, dry_run=dry_run)
    started = time.perf_counter()
    page = max(batch_size * concurrency, batch_size)
    cursor = after
    semaphore = asyncio.Semaphore(concurrency)
    while report.scanned < limit:
        rows = await repo.missing_embeddings(
            model, project_id, include_archived, older_than_days, min(page, limit - report.scanned), after=cursor
        )
        if not rows:
            break
        report.scanned += len(rows)
        cursor = (rows[-1]["created_at"], rows[-1]["id"])
        if dry_run:
            report.sample_ids.extend(str(r["id"]) for r in rows[: SAMPLE_IDS - len(report.sample_ids)])
            continue
        todo = [r for r in rows if r["content"] and r["content"].strip()]
        report.skipped += len(rows) - len(todo)
        batches = [todo[i : i + batch_size] for i in range(0, len(todo), batch_size)]
        for items in await asyncio.gather(*(_limited(semaphore, embedder, b, report) for b in batches)):
            if items:
                await _write(session, model, items, report)
        if progress is not None:
            await progress(report.scanned, limit)
    report.cursor = cursor
    log.info(
        "backfill",
        extra={
            "model": model,
            "project": str(project_id) if project_id else None,
            "scanned": report.scanned,
            "embedded": report.embedded,
            "failed": report.failed,
            "ms": round((time.perf_counter() - started) * 1000, 1),
        },
    )
    return report
