"""app/memory/lifecycle.py: the background backfill runner queues memories missing a vector in one
bounded pass, survives a failing pass (logged, counted), runs on start-up and then every interval while
enabled, does nothing when disabled, and the feature's startup/shutdown hooks start and stop it."""

from __future__ import annotations

import json
import uuid

from sqlalchemy import text

from app.core.config import Settings
from app.core.context import AppState
from app.core.db import Database
from app.core.embeddings.providers import build_embedder
from app.core.registry import Registry
from app.core.repository import ProjectRepository
from app.memory import lifecycle
from app.memory.config import MemorySettings
from app.memory.lifecycle import BackfillRunner
from app.memory.repository import MemoryRepository
from tests.support.databases import database_fixture
from tests.support.server import PgCluster, free_port
from tests.support.waiting import eventually

MODEL = "runner-model"


db = database_fixture(["memory"])


async def _memories(db: Database, n: int, project: str = "runner") -> None:
    async with db.transaction() as session:
        pid = await ProjectRepository(session).ensure_id(project)
        coll, _ = await MemoryRepository(session).ensure_collection("runner-c", MODEL, 3)
        await MemoryRepository(session).insert_memories(
            [
                {
                    "id": uuid.uuid4(),
                    "project_id": pid,
                    "collection_id": coll.id,
                    "kind": "thought",
                    "memory_type": "semantic",
                    "content": f"note {i}",
                    "content_hash": f"runner-{uuid.uuid4()}",
                    "tags": [],
                    "metadata": json.dumps({}),
                    "source_uri": None,
                    "document_id": None,
                    "chunk_index": None,
                    "summary_key": None,
                }
                for i in range(n)
            ]
        )


async def _queued(db: Database) -> int:
    async with db.transaction() as session:
        return int(
            await session.scalar(
                text("SELECT count(*) FROM embedding_queue WHERE target = 'memory' AND model = :m"), {"m": MODEL}
            )
            or 0
        )


async def test_one_pass_queues_up_to_its_bound_and_a_failing_pass_is_counted(db: Database, pg: PgCluster) -> None:
    await _memories(db, 5)
    settings = MemorySettings(backfill_batch_size=2, backfill_max_per_run=3)
    runner = BackfillRunner(db, MODEL, settings)
    report = await runner.run_once()
    assert report is not None and report.queued == 3 and runner.runs == 1
    assert await _queued(db) == 3
    again = await runner.run_once()
    assert again is not None and again.job_ids == report.job_ids  # the same oldest rows, queued once
    assert await _queued(db) == 3 and runner.runs == 2
    broken = Database(pg.handle.url("no_such_database"), Settings())
    try:
        failing = BackfillRunner(broken, MODEL, settings)
        assert await failing.run_once() is None and failing.runs == 1
    finally:
        await broken.dispose()


async def test_the_runner_runs_on_start_up_then_every_interval_until_stopped(db: Database) -> None:
    disabled = BackfillRunner(db, MODEL, MemorySettings(backfill_run_on_startup=True))
    await disabled.run_forever()  # returns at once: not enabled
    disabled.start()
    assert disabled.runs == 0 and disabled._task is None
    once = BackfillRunner(
        db, MODEL, MemorySettings(backfill_enabled=True, backfill_run_on_startup=True, backfill_interval=None)
    )
    await once.run_forever()  # start-up only: one pass, then it returns
    assert once.runs == 1
    periodic = BackfillRunner(db, MODEL, MemorySettings(backfill_enabled=True, backfill_interval="0.05"))
    periodic.start()
    try:
        await eventually(lambda: periodic.runs >= 2, timeout=20, what="two periodic passes")
    finally:
        await periodic.stop()
    stopped_at = periodic.runs
    assert periodic._task is None
    await periodic.stop()  # stopping twice is harmless
    assert periodic.runs == stopped_at


async def test_startup_and_shutdown_hooks_keep_the_runner_in_the_state(db: Database) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    embedder = build_embedder("openai", model="text-embedding-3-small", dimension=384, base_url=url, timeout=2)
    enabled = MemorySettings(backfill_enabled=True, backfill_interval="1h")
    state = AppState(Settings(), db, embedder, Registry(), feature_settings={MemorySettings: enabled})
    await lifecycle.startup(state)
    runner = state.extras["memory_backfill"]
    assert isinstance(runner, BackfillRunner) and runner.model == "text-embedding-3-small"
    assert runner._task is not None and not runner._task.done()
    task = runner._task
    await lifecycle.shutdown(state)
    assert "memory_backfill" not in state.extras and task.cancelled() and runner._task is None
    await lifecycle.shutdown(state)  # nothing to stop
