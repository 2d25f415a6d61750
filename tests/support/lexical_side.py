"""A migrated database of every feature for the lexical side table's tests (graph_0006,
`LexicalIndex.side`, `app.core.embeddings.lexical_mover`): a mover on it, and plain looks at its tables."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text

from app.core import migrations
from app.core.config import Settings
from app.core.db import Database
from app.core.embeddings import lexical
from app.core.embeddings.lexical_mover import LexicalMover
from app.features import FEATURES
from app.graph.repository import GraphRepository
from app.graph.repository_search import ENTITY_LEXICAL, SearchRepository
from tests.support.server import PgCluster, server_settings


class Side:
    """A migrated database, a mover on it, and a plain connection to look at the tables."""

    def __init__(self, db: Database, dsn: str, settings: Settings) -> None:
        self.db = db
        self.dsn = dsn
        self.settings = settings
        self.mover = LexicalMover(db, [ENTITY_LEXICAL], settings)

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        conn = await asyncpg.connect(self.dsn)
        try:
            return list(await conn.fetch(sql, *args))
        finally:
            await conn.close()

    async def pending(self) -> set[int]:
        return {r["id"] for r in await self.fetch("SELECT id FROM graph_entity_lexical_pending")}

    async def copied(self) -> set[int]:
        return {r["id"] for r in await self.fetch("SELECT id FROM graph_entity_lexical")}

    async def entities(self, pid: uuid.UUID, rows: dict[str, str]) -> dict[str, int]:
        async with self.db.transaction() as session:
            repo = GraphRepository(session)
            made = await repo.insert_entities(pid, [(n, "note", "active") for n in rows], [[o] for o in rows.values()])
        return {r.name: r.id for r in made}

    async def search(self, pid: uuid.UUID, words: str, entity_type: str | None = None) -> list[int]:
        lexical.forget_stats()
        async with self.db.transaction() as session:
            repo = SearchRepository(session)
            return [i for i, _ in await repo.text_candidates(pid, await repo.lexical_query(words), 10, entity_type)]


@pytest.fixture(scope="module")
async def side(pg: PgCluster) -> AsyncIterator[Side]:
    name = pg.new_database()
    url = pg.handle.url(name)
    await migrations.upgrade_async(url, [f.name for f in FEATURES])
    settings = server_settings(url)
    db = Database(url, settings)
    try:
        yield Side(db, pg.handle.libpq_uri(name), settings)
    finally:
        await db.dispose()


async def project(side: Side) -> uuid.UUID:
    pid = uuid.uuid4()
    async with side.db.transaction() as session:
        await session.execute(text("INSERT INTO projects (id, name) VALUES (:p, :n)"), {"p": pid, "n": f"s-{pid.hex}"})
    return pid
