"""app/core/keyusage.py against a real database: uses noted in memory reach `api_keys.last_used_at` in
one statement per flush, periodically and when the block ends; a failed write keeps them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError

from app.core.config import Settings
from app.core.db import Database
from app.core.keyusage import KeyUsage
from app.core.repository import ApiKeyRepository
from tests.support.databases import database_fixture
from tests.support.server import PgCluster
from tests.support.waiting import eventually

db = database_fixture([], settings=Settings(db_pool_size=2, db_max_overflow=0))


async def _keys(db: Database, n: int) -> list[uuid.UUID]:
    async with db.transaction() as session:
        repo = ApiKeyRepository(session)
        made = [
            await repo.add(
                name=f"k{i}", prefix=uuid.uuid4().hex[:12], key_hash=uuid.uuid4().hex, scopes=["read"], project=None
            )
            for i in range(n)
        ]
        return [k.id for k in made]


async def _last_used(db: Database, ids: list[uuid.UUID]) -> dict[uuid.UUID, datetime | None]:
    async with db.transaction() as session:
        rows = await session.execute(text("SELECT id, last_used_at FROM api_keys WHERE id = ANY(:ids)"), {"ids": ids})
        return {r.id: r.last_used_at for r in rows}


async def test_uses_are_written_in_one_statement_and_only_the_latest_counts(db: Database) -> None:
    ids = await _keys(db, 3)
    usage = KeyUsage(db, interval=3600)
    base = datetime(2026, 5, 1, tzinfo=UTC)
    usage.record(ids[0], base)
    usage.record(ids[0], base + timedelta(seconds=5))
    usage.record(ids[0], base + timedelta(seconds=1))  # an older note does not win
    usage.record(ids[1], base)
    assert (await _last_used(db, ids))[ids[0]] is None  # nothing written on record
    statements: list[str] = []

    def seen(_conn: object, _cursor: object, statement: str, *_rest: object) -> None:
        statements.append(statement)

    event.listen(db.engine.sync_engine, "before_cursor_execute", seen)
    try:
        assert await usage.flush() == 2
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", seen)
    assert [s for s in statements if "api_keys" in s] and len([s for s in statements if "UPDATE" in s]) == 1
    assert await _last_used(db, ids) == {ids[0]: base + timedelta(seconds=5), ids[1]: base, ids[2]: None}
    assert usage.pending == 0 and await usage.flush() == 0


async def test_the_background_task_flushes_periodically_and_at_the_end(db: Database) -> None:
    ids = await _keys(db, 2)
    usage = KeyUsage(db, interval=0.2)
    async with usage.running():
        usage.record(ids[0])
        await eventually(lambda: _written(db, ids[0]), timeout=20)
        usage.record(ids[1])  # no await before the block ends: only the final flush can write it
    assert (await _last_used(db, ids))[ids[1]] is not None


async def _written(db: Database, key_id: uuid.UUID) -> bool:
    return (await _last_used(db, [key_id]))[key_id] is not None


async def test_a_failed_write_keeps_the_uses_for_the_next_try(pg: PgCluster, db: Database) -> None:
    ids = await _keys(db, 1)
    broken = Database(pg.handle.url("no_such_database_here"), Settings(db_pool_size=1, db_max_overflow=0))
    usage = KeyUsage(broken, interval=3600)
    usage.record(ids[0], datetime(2026, 6, 1, tzinfo=UTC))
    try:
        with pytest.raises(DBAPIError):
            await usage.flush()
    finally:
        await broken.dispose()
    assert usage.pending == 1
    usage.db = db
    assert await usage.flush() == 1
    assert (await _last_used(db, ids))[ids[0]] == datetime(2026, 6, 1, tzinfo=UTC)
