"""app/core/repository.py on a migrated database of its own: the base's helpers return rows by column
name, projects are created once (ensure is safe when the name exists), keys are found by hash until
revoked (by id or prefix, per project) and lock the database for good, embedding models are registered
once, and the audit log pages backwards with its filters."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.config import Settings
from app.core.db import Database
from app.core.models import ApiKey, AuditEntry
from app.core.repository import (
    ApiKeyRepository,
    AuditRepository,
    EmbeddingModelRepository,
    ProjectRepository,
    Repository,
    SecretRepository,
    _statement,
)
from tests.support.databases import database_fixture, migrated_url
from tests.support.server import PgCluster


@dataclass
class Pair:
    n: int
    label: str


db = database_fixture([])


async def test_the_base_returns_rows_by_name(db: Database) -> None:
    sql = "SELECT n, 'x' || n AS label FROM generate_series(1, :top) AS n ORDER BY n"
    async with db.transaction() as session:
        repo = Repository(session)
        assert [dict(r) for r in await repo.rows(sql, {"top": 2})] == [{"n": 1, "label": "x1"}, {"n": 2, "label": "x2"}]
        assert await repo.rows(sql, {"top": 2}, into=Pair) == [Pair(1, "x1"), Pair(2, "x2")]
        assert await repo.row(sql, {"top": 3}, into=Pair) == Pair(1, "x1")
        assert await repo.row(sql, {"top": 0}) is None and await repo.row(sql, {"top": 0}, into=Pair) is None
        assert await repo.dicts(sql, {"top": 1}) == [{"n": 1, "label": "x1"}]
        assert await repo.scalar(sql, {"top": 3}) == 1 and await repo.scalar(sql, {"top": 0}) is None
        assert await repo.scalars(sql, {"top": 3}) == [1, 2, 3]
        await repo.execute("CREATE TEMP TABLE t (v int)")
        assert await repo.rowcount("INSERT INTO t SELECT generate_series(1, 4)") == 4
        assert await repo.rowcount("DELETE FROM t WHERE v > :v", {"v": 1}) == 3


async def test_projects_are_created_once_and_ensured(db: Database) -> None:
    async with db.transaction() as session:
        repo = ProjectRepository(session)
        made = await repo.create("beta", "second")
        assert made is not None and made.description == "second"
        assert await repo.create("beta", "again") is None  # the name is taken
        alpha = await repo.ensure("alpha")
        assert (await repo.ensure("alpha")).id == alpha.id
        assert await repo.ensure_id("beta") == made.id == await repo.id_of("beta")
        fresh = await repo.ensure_id("gamma")
        assert (await repo.by_id(fresh)) is not None and await repo.id_of("nope") is None
        assert [p.name for p in await repo.list()] == ["alpha", "beta", "gamma"]
        assert [p.name for p in await repo.list(limit=1, offset=1)] == ["beta"]
        assert [p.name for p in await repo.list(only="gamma")] == ["gamma"]
        assert await repo.count() == 3 and await repo.count(only="gamma") == 1 and await repo.count(only="x") == 0
        rows, total = await repo.page(limit=2, offset=1)
        assert [p.name for p in rows] == ["beta", "gamma"] and total == 3 and rows[0].id == made.id
        assert rows[0].description == "second" and rows[0].created_at is not None
        only, one = await repo.page(only="gamma")
        assert [p.name for p in only] == ["gamma"] and one == 1
        assert await repo.page(offset=5) == ([], 3) and await repo.page(only="x") == ([], 0)
        assert (await repo.get("alpha")) is not None and await repo.get("zeta") is None


async def test_concurrent_ensures_make_one_project(db: Database) -> None:
    async def ensure() -> uuid.UUID:
        async with db.transaction() as session:
            return await ProjectRepository(session).ensure_id("raced")

    ids = await asyncio.gather(*(ensure() for _ in range(4)))
    assert len(set(ids)) == 1


async def test_keys_are_found_by_hash_until_revoked(db: Database) -> None:
    async with db.transaction() as session:
        repo = ApiKeyRepository(session)
        one = await repo.add(name="one", prefix="cairn_aaaaaa", key_hash="h1", scopes=["read"], project=None)
        two = await repo.add(
            name="two", prefix="cairn_bbbbbb", key_hash="h2", scopes=["admin"], project="team", toolsets=[]
        )
        assert two.toolsets is None  # an empty list means the server's default
        assert (await repo.by_hash("h1")) is one and await repo.by_hash("nope") is None
        assert await repo.count_active() == 2
        assert [k.name for k in await repo.list(project="team")] == ["two"]
        assert await repo.revoke("cairn_aaaaaa", project="team") == 0  # not that project's key
        assert await repo.revoke("cairn_aaaaaa") == 1
        assert await repo.revoke(str(two.id)) == 1 and await repo.revoke(str(two.id)) == 0
        assert await repo.by_hash("h1") is None and await repo.count_active() == 0
        assert await repo.list() == [] and {k.name for k in await repo.list(include_revoked=True)} == {"one", "two"}
        assert one.last_used_at is None
        early, late = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC)
        assert await repo.touch_many({one.id: late, two.id: early}) == 2  # one statement for both
        assert await repo.touch_many({one.id: early}) == 1
        await session.refresh(one)
        await session.refresh(two)
        used = {k.name: k.last_used_at for k in await repo.list(include_revoked=True)}
        assert used == {"one": late, "two": early}  # a time never moves back
        assert await repo.touch_many({}) == 0


async def test_embedding_models_are_registered_once(db: Database) -> None:
    async with db.transaction() as session:
        repo = EmbeddingModelRepository(session)
        await repo.register("m-a", "local", 8)
        await repo.register("m-b", "local", 16)
        await repo.register("m-a", "local", 8)
        models = await repo.list()
        assert sorted((m.name, m.dimension) for m in models) == [("m-a", 8), ("m-b", 16)]


async def test_the_audit_log_pages_backwards_with_its_filters(db: Database) -> None:
    async with db.transaction() as session:
        repo = AuditRepository(session)
        for i in range(5):
            entry = AuditEntry(
                key_id="k1" if i % 2 == 0 else "k2",
                key_name="n",
                operation="remember" if i < 3 else "forget",
                transport="rest",
                project="team" if i != 4 else "solo",
                outcome="ok",
                error_code=None,
                counts={"i": i} if i else None,
                request_id=f"r{i}",
            )
            await repo.add(entry)
        newest = await _page(repo, limit=2)
        assert [e.request_id for e in newest] == ["r4", "r3"]
        older = await _page(repo, before_id=newest[-1].id)
        assert [e.request_id for e in older] == ["r2", "r1", "r0"] and older[-1].counts == {}
        assert [e.request_id for e in await _page(repo, key_id="k2")] == ["r3", "r1"]
        assert [e.request_id for e in await _page(repo, operation="forget", project="team")] == ["r3"]
        assert await _page(repo, since=datetime.now(UTC) + timedelta(hours=1)) == []


async def _page(
    repo: AuditRepository,
    *,
    key_id: str | None = None,
    operation: str | None = None,
    project: str | None = None,
    since: datetime | None = None,
    before_id: int | None = None,
    limit: int = 10,
) -> list[AuditEntry]:
    return await repo.page(
        key_id=key_id, operation=operation, project=project, since=since, before_id=before_id, limit=limit
    )


async def test_a_created_key_locks_the_database_in_its_own_transaction(pg: PgCluster) -> None:
    fresh = Database(migrated_url(pg, []), Settings())

    async def add_key(session: AsyncSession) -> ApiKey:
        return await ApiKeyRepository(session).add(
            name="k", prefix="cairn_lock", key_hash="d" * 64, scopes=["read"], project=None
        )

    try:
        async with fresh.transaction() as session:
            repo = ApiKeyRepository(session)
            assert not await repo.locked() and not await repo.keys_required()
        with pytest.raises(RuntimeError, match="rolled back"):
            async with fresh.transaction() as session:
                await add_key(session)
                raise RuntimeError("rolled back")
        async with fresh.transaction() as session:
            assert not await ApiKeyRepository(session).locked()  # the lock went with the key
            row = await add_key(session)
        async with fresh.transaction() as session:
            repo = ApiKeyRepository(session)
            assert await repo.locked() and await repo.keys_required()
            assert await repo.revoke(str(row.id)) == 1
        async with fresh.transaction() as session:
            repo = ApiKeyRepository(session)
            await repo.lock("again")  # idempotent
            assert await repo.count_active() == 0 and await repo.keys_required()  # revoked, still locked
    finally:
        await fresh.dispose()


async def test_key_creations_wait_for_each_other_and_then_see_the_lock(pg: PgCluster) -> None:
    """Of two transactions creating keys at once, the second waits for the first to commit, and then
    finds the database locked (an open server's anonymous caller is refused on that)."""
    fresh = Database(migrated_url(pg, []), Settings())
    first_in, second_done = asyncio.Event(), asyncio.Event()
    seen: list[bool] = []

    async def first() -> None:
        async with fresh.transaction() as session:
            repo = ApiKeyRepository(session)
            seen.append(await repo.serialize_creation())
            await repo.add(name="a", prefix="cairn_first", key_hash="a" * 64, scopes=["admin"], project=None)
            first_in.set()
            await asyncio.sleep(0.3)
            assert not second_done.is_set()  # the second is still waiting for this commit

    async def second() -> None:
        await first_in.wait()
        async with fresh.transaction() as session:
            seen.append(await ApiKeyRepository(session).serialize_creation())
        second_done.set()

    try:
        await asyncio.wait_for(asyncio.gather(first(), second()), 30)
        assert seen == [False, True]
    finally:
        await fresh.dispose()


async def test_a_shared_secret_is_made_once(db: Database) -> None:
    async with db.transaction() as session:
        made = await SecretRepository(session).ensure("test-secret", "first")
    async with db.transaction() as session:
        assert await SecretRepository(session).ensure("test-secret", "second") == made == "first"
        assert await SecretRepository(session).ensure("other-secret", "x") == "x"


async def test_a_text_statement_is_built_once_and_shared(db: Database) -> None:
    sql = "SELECT CAST(:n AS int) + 1 AS m"
    async with db.transaction() as session:
        repo = Repository(session)
        assert await repo.scalar(sql, {"n": 1}) == 2 and await repo.scalar(sql, {"n": 41}) == 42
    assert _statement(sql) is _statement(sql)  # one TextClause, its parameters parsed once
