"""app/core/operations.py, its handlers called with a real call context on a migrated database of
their own: project pages with their next offset, the audit log kept to a bound key's project and paged
backwards, the server-wide embedding wait refused to a bound key, and the health, settings and
toolsets resources (the queue's depth hidden from bound keys, a database that does not answer)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import TypeVar

import pytest
from pydantic import BaseModel

from app import __version__
from app.core import operations
from app.core.config import Settings
from app.core.context import AppState, CallContext, Principal
from app.core.db import Database
from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.embeddings.queue import EmbeddingQueue
from app.core.errors import Forbidden
from app.core.executor import run_operation
from app.core.models import AuditEntry
from app.core.registry import Registry
from app.core.repository import AuditRepository
from app.core.schemas import (
    AuditLogIn,
    AuditLogOut,
    CreateProjectIn,
    CreateProjectOut,
    HealthOut,
    ListProjectsIn,
    ListProjectsOut,
    SettingsOut,
    ToolsetsOut,
    WaitForEmbeddingsIn,
    WaitForEmbeddingsOut,
)
from app.core.toolsets import Catalog
from tests.support.databases import database_fixture
from tests.support.server import free_port
from tests.support.statements import statement_paths

ADMIN = Principal(key_id="a", name="admin", scopes=frozenset({"admin"}))
BOUND = Principal(key_id="b", name="bound", scopes=frozenset({"admin"}), project="team")
M = TypeVar("M", bound=BaseModel)


async def reply(cls: type[M], pending: Awaitable[BaseModel]) -> M:
    """The handler's reply, checked to be of its declared output class."""
    out = await pending
    assert isinstance(out, cls)
    return out


db = database_fixture([])


@pytest.fixture(scope="module")
def state(db: Database) -> AppState:
    registry = Registry()
    registry.add(operations.ops)
    made = AppState(
        Settings(), db, LocalOnnxEmbedder(), registry, features=["memory"], public_settings={"memory": {"limit": 7}}
    )
    made.queue = EmbeddingQueue(db, made.embedder, [], made.settings)
    made.catalog = Catalog(registry, [])
    made.extras["migrations_at_head"] = True
    return made


@asynccontextmanager
async def call(state: AppState, principal: Principal = ADMIN) -> AsyncIterator[CallContext]:
    async with state.db.transaction() as session:
        yield CallContext(session=session, principal=principal, app=state, request_id="t", transport="test")


async def test_projects_are_paged_with_their_next_offset(state: AppState) -> None:
    async with call(state) as ctx:
        for name in ("a", "b", "c"):
            made = await reply(CreateProjectOut, operations.create_project(ctx, CreateProjectIn(name=name)))
            assert made.created and made.project.name == name
        assert not (await reply(CreateProjectOut, operations.create_project(ctx, CreateProjectIn(name="a")))).created
        first = await reply(ListProjectsOut, operations.list_projects(ctx, ListProjectsIn(limit=2)))
        assert [p.name for p in first.projects] == ["a", "b"] and first.total == 3 and first.next_offset == 2
        last = await reply(ListProjectsOut, operations.list_projects(ctx, ListProjectsIn(limit=2, offset=2)))
        assert [p.name for p in last.projects] == ["c"] and last.next_offset is None


async def test_an_operation_of_one_statement_runs_one_statement_on_the_driver(
    state: AppState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`one_statement` operations (list_projects) run exactly one statement, through the executor, on
    the driver (`DriverSession`: no BEGIN / COMMIT, no SQLAlchemy statement); a second statement would
    read another snapshot, so this count is what makes the declaration safe."""
    ones = [op for op in state.registry.operations if op.one_statement]
    assert [op.name for op in ones] == ["list_projects"]
    with statement_paths(state.db, monkeypatch) as paths:
        for op in ones:
            for principal in (ADMIN, BOUND):
                paths.clear()
                out = await run_operation(state, op, {}, principal, transport="test", request_id="t")
                assert isinstance(out, op.output_model)
                assert len(paths.on_driver) == 1 and paths.through_sqlalchemy == [], (op.name, paths)
        paths.on_driver.clear()  # an operation without the declaration: an ordinary transaction
        made = next(op for op in state.registry.operations if op.name == "create_project")
        await run_operation(state, made, {"name": "one-statement-check"}, ADMIN, transport="test", request_id="t")
        assert paths.through_sqlalchemy and paths.on_driver == []


async def test_the_audit_log_is_paged_and_kept_to_a_bound_keys_project(state: AppState) -> None:
    async with call(state) as ctx:
        for i, project in enumerate(["team", "team", "solo", "team"]):
            entry = AuditEntry(
                key_id="k", key_name="k", operation="op", transport="rest", project=project, outcome="ok",
                request_id=f"r{i}",
            )  # fmt: skip
            await AuditRepository(ctx.session).add(entry)
        page = await reply(AuditLogOut, operations.audit_log(ctx, AuditLogIn(limit=2)))
        assert [e.request_id for e in page.entries] == ["r3", "r2"] and page.next_before_id == page.entries[-1].id
        rest = await reply(AuditLogOut, operations.audit_log(ctx, AuditLogIn(limit=2, before_id=page.next_before_id)))
        assert [e.request_id for e in rest.entries] == ["r1", "r0"] and rest.next_before_id is not None
        solo = await reply(AuditLogOut, operations.audit_log(ctx, AuditLogIn(project="solo")))
        assert [e.request_id for e in solo.entries] == ["r2"] and solo.next_before_id is None
    async with call(state, BOUND) as ctx:
        mine = await reply(AuditLogOut, operations.audit_log(ctx, AuditLogIn()))
        assert [e.request_id for e in mine.entries] == ["r3", "r1", "r0"]  # its project's entries only
        with pytest.raises(Forbidden):
            await reply(AuditLogOut, operations.audit_log(ctx, AuditLogIn(project="solo")))


async def test_the_embedding_wait_is_refused_to_a_bound_key(state: AppState) -> None:
    async with call(state, BOUND) as ctx:
        with pytest.raises(Forbidden, match="bound to project 'team'") as refused:
            await reply(
                WaitForEmbeddingsOut, operations.wait_for_embeddings(ctx, WaitForEmbeddingsIn(timeout_seconds=1))
            )
    assert refused.value.suggestions and "wait_for_embedding" in refused.value.suggestions[0]
    async with call(state) as ctx:
        done = await reply(
            WaitForEmbeddingsOut, operations.wait_for_embeddings(ctx, WaitForEmbeddingsIn(timeout_seconds=5))
        )
    assert done.drained and done.depth == 0  # nothing was queued


async def test_health_reports_the_parts_and_hides_the_queue_from_a_bound_key(state: AppState) -> None:
    async with call(state) as ctx:
        health = await reply(HealthOut, operations.health(ctx))
    assert (health.status, health.version, health.features) == ("ok", __version__, ["memory"])
    assert health.database.reachable and health.database.migrations_at_head and not health.database.embedded
    assert health.embedding_queue is not None and health.embedding_queue.depth == 0
    assert health.embedding.model == state.embedder.model and health.embedding.dimension == state.embedder.dimension
    async with call(state, BOUND) as ctx:
        assert (await reply(HealthOut, operations.health(ctx))).embedding_queue is None


async def test_health_answers_when_the_database_does_not(state: AppState, db: Database) -> None:
    gone = Database(f"postgresql+asyncpg://nobody:x@127.0.0.1:{free_port()}/none", Settings())
    down = AppState(state.settings, gone, state.embedder, state.registry)
    down.queue = EmbeddingQueue(gone, state.embedder, [], state.settings)
    try:
        async with db.transaction() as session:
            ctx = CallContext(session=session, principal=ADMIN, app=down, request_id="t", transport="test")
            health = await reply(HealthOut, operations.health(ctx))
    finally:
        await gone.dispose()
    assert health.status == "degraded" and not health.database.reachable and health.embedding_queue is None
    assert health.database.migrations_at_head is None


async def test_settings_and_toolsets_resources(state: AppState) -> None:
    async with call(state) as ctx:
        published = await reply(SettingsOut, operations.settings(ctx))
        listed = await reply(ToolsetsOut, operations.toolsets(ctx))
    dumped = published.model_dump()
    assert dumped["features"] == ["memory"] and dumped["memory"] == {"limit": 7}
    assert dumped["embedding"]["provider"] == state.embedder.provider
    by_name = {t.name: t for t in listed.toolsets}
    assert set(by_name) == {"projects", "admin"} and "/mcp/all" in listed.hint
    assert {"create_project", "list_projects"} <= set(by_name["projects"].tools)
    assert by_name["admin"].endpoint.endswith("/admin")
    bare = AppState(state.settings, state.db, state.embedder, state.registry)
    async with call(bare) as ctx:
        assert (await reply(ToolsetsOut, operations.toolsets(ctx))).toolsets == []
