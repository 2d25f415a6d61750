"""Embedding backfill (seed 004): queue the memories that lack a vector of the active model.

The vectors themselves are made by the core embedding queue (its workers in `cairn serve`, or
`cairn backfill`, which drains the queue itself), so a backfill never holds a transaction open while
a model runs. A pass scans oldest first with keyset paging and queues the rows with text; one call
queues at most `limit` rows.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.core.embeddings.repository import EmbeddingQueueRepository
from app.memory.repository import MEMORY_TARGET, MemoryRepository

log = logging.getLogger("cairn.memory.backfill")

SAMPLE_IDS = 10
Progress = Callable[[int, int], Awaitable[None]]


@dataclass
class BackfillReport:
    """Counts of one backfill pass."""

    model: str
    scanned: int = 0
    queued: int = 0
    embedded: int = 0
    skipped: int = 0
    failed: int = 0
    dry_run: bool = False
    failures: list[dict[str, str]] = field(default_factory=list)
    sample_ids: list[str] = field(default_factory=list)
    cursor: tuple[datetime, uuid.UUID] | None = None
    job_ids: list[int] = field(default_factory=list)

    def public(self) -> dict[str, Any]:
        """The seed's output shape, plus how many rows were queued."""
        return {
            "model": self.model,
            "scanned": self.scanned,
            "queued": self.queued,
            "embedded": self.embedded,
            "skipped": self.skipped,
            "failed": self.failed,
            "dry_run": self.dry_run,
            "failures": self.failures,
            "sample_ids": self.sample_ids,
        }


async def backfill(
    session: AsyncSession,
    model: str,
    *,
    project_id: uuid.UUID | None,
    limit: int,
    batch_size: int,
    include_archived: bool = False,
    older_than_days: int = 0,
    dry_run: bool = False,
    progress: Progress | None = None,
    after: tuple[datetime, uuid.UUID] | None = None,
) -> BackfillReport:
    """Queue up to `limit` memories lacking a vector of `model`, oldest first (nothing with `dry_run`:
    count and sample ids)."""
    repo = MemoryRepository(session)
    queue = EmbeddingQueueRepository(session)
    report = BackfillReport(model=model, dry_run=dry_run)
    started = time.perf_counter()
    cursor = after
    while report.scanned < limit:
        rows = await repo.missing_embeddings(
            model, project_id, include_archived, older_than_days, min(batch_size, limit - report.scanned), after=cursor
        )
        if not rows:
            break
        report.scanned += len(rows)
        cursor = (rows[-1]["created_at"], rows[-1]["id"])
        if dry_run:
            report.sample_ids.extend(str(r["id"]) for r in rows[: SAMPLE_IDS - len(report.sample_ids)])
            continue
        todo = [str(r["id"]) for r in rows if r["content"] and r["content"].strip()]
        report.skipped += len(rows) - len(todo)
        report.job_ids += await queue.enqueue(MEMORY_TARGET, todo, model, bump=False)
        report.queued += len(todo)
        if progress is not None:
            await progress(report.scanned, limit)
    report.cursor = cursor
    log.info(
        "backfill",
        extra={
            "model": model,
            "project": str(project_id) if project_id else None,
            "scanned": report.scanned,
            "queued": report.queued,
            "ms": round((time.perf_counter() - started) * 1000, 1),
        },
    )
    return report
