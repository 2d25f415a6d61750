"""app/memory/service_backfill.py on a database of its own: memories lacking a vector of a model are
counted by a dry run, queued oldest first in batches up to a limit, and a pass continues from where
the last one stopped; another project's memories stay out of a project's pass."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from app.core.config import Settings
from app.core.context import AppState, CallContext, Principal
from app.core.db import Database
from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.registry import Registry
from app.memory import service
from app.memory.schemas import PushIn
from app.memory.service_backfill import SAMPLE_IDS, backfill
from tests.support.databases import migrated_url
from tests.support.server import PgCluster

MODEL = "backfill-test-model"  # no memory has a vector of it
WRITER = Principal(key_id="w", name="writer", scopes=frozenset({"write"}))


@pytest.fixture(scope="module")
async def db(pg: PgCluster) -> AsyncIterator[Database]:
    database = Database(migrated_url(pg, ["memory"]), Settings())
    state = AppState(Settings(), database, LocalOnnxEmbedder(), Registry())
    try:
        for name, count in (("lab", 14), ("other", 3)):
            for i in range(count):  # one transaction each: each memory its own creation time
                async with database.transaction() as session:
                    ctx = CallContext(session=session, principal=WRITER, app=state, request_id="t", transport="t")
                    await service.push(ctx, PushIn.model_validate({"text": f"{name} memory {i}", "project": name}))
        async with database.transaction() as session:
            await session.execute(text("DELETE FROM embedding_queue"))  # as if the pushes' rows were lost
        yield database
    finally:
        await database.dispose()


async def _project(db: Database, name: str) -> uuid.UUID:
    async with db.transaction() as s:
        found = await s.scalar(text("SELECT id FROM projects WHERE name = :n"), {"n": name})
    assert isinstance(found, uuid.UUID)
    return found


async def _queued(db: Database) -> int:
    async with db.transaction() as s:
        return int(await s.scalar(text("SELECT count(*) FROM embedding_queue WHERE model = :m"), {"m": MODEL}) or 0)


async def test_a_dry_run_counts_and_samples_without_queueing(db: Database) -> None:
    lab = await _project(db, "lab")
    async with db.transaction() as s:
        report = await backfill(s, MODEL, project_id=lab, limit=100, batch_size=4, dry_run=True)
    assert (report.scanned, report.queued, len(report.sample_ids)) == (14, 0, SAMPLE_IDS)
    assert report.public()["dry_run"] is True and await _queued(db) == 0


async def test_passes_queue_oldest_first_up_to_the_limit_and_continue(db: Database) -> None:
    lab = await _project(db, "lab")
    seen: list[tuple[int, int]] = []

    async def progress(done: int, total: int) -> None:
        seen.append((done, total))

    async with db.transaction() as s:
        first = await backfill(s, MODEL, project_id=lab, limit=10, batch_size=4, progress=progress)
    assert (first.scanned, first.queued, len(first.job_ids)) == (10, 10, 10)
    assert seen == [(4, 10), (8, 10), (10, 10)] and first.cursor is not None
    async with db.transaction() as s:
        oldest = [
            str(r)
            for r in await s.scalars(
                text("SELECT id FROM memories WHERE project_id = :p ORDER BY created_at, id LIMIT 10"), {"p": lab}
            )
        ]
        queued = [
            str(r)
            for r in await s.scalars(
                text("SELECT ref FROM embedding_queue WHERE id = ANY(:ids)"), {"ids": first.job_ids}
            )
        ]
    assert sorted(queued) == sorted(oldest)
    async with db.transaction() as s:
        rest = await backfill(s, MODEL, project_id=lab, limit=10, batch_size=4, after=first.cursor)
    assert (rest.scanned, rest.queued) == (4, 4)  # the four left of fourteen, none of the other project's
    assert await _queued(db) == 14
    async with db.transaction() as s:
        everyone = await backfill(s, MODEL, project_id=None, limit=100, batch_size=50, dry_run=True)
    assert everyone.scanned == 17  # queued is not embedded: every memory still lacks a vector
