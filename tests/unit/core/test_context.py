"""app/core/context.py with a real session: scope ranks, the project a call may act on (checked name,
bound keys), the embedding caller it names, feature settings read once, progress that never fails the
work, slow work run with the reads released, and the hooks kept in order."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from pydantic_settings import BaseSettings
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.context import OPEN_PRINCIPAL, CallContext, Principal, feature_settings_of, read_only_endpoint
from app.core.db import Database
from app.core.embeddings.provider import embedding_caller
from app.core.errors import Forbidden, InvalidInput
from tests.support.calls import service_call
from tests.support.databases import database_fixture

READER = Principal(key_id="r1", name="reader", scopes=frozenset({"read"}))
BOUND = Principal(key_id="b1", name="bound", scopes=frozenset({"write"}), project="team")


class Knobs(BaseSettings):
    depth: int = 3


db = database_fixture([])


def call(db: Database, principal: Principal = READER, **kw: Any) -> AbstractAsyncContextManager[CallContext]:
    return service_call(db, principal, **kw)


def test_an_open_servers_callers_are_one_caller_for_the_per_key_limits() -> None:
    ctx = CallContext(session=None, principal=OPEN_PRINCIPAL, app=None, request_id="r", transport="t")  # type: ignore[arg-type]
    assert ctx.caller_key == "open-mode"


def test_scopes_rank_admin_over_write_over_read() -> None:
    writer = Principal(key_id=None, name="w", scopes=frozenset({"write"}))
    assert writer.has_scope("read") and writer.has_scope("write") and not writer.has_scope("admin")
    assert READER.has_scope("read") and not READER.has_scope("write")
    assert OPEN_PRINCIPAL.has_scope("admin") and OPEN_PRINCIPAL.key_id is None
    assert not Principal(key_id=None, name="x", scopes=frozenset({"owner"})).has_scope("read")


def test_feature_settings_are_read_once_and_kept() -> None:
    given = Knobs(depth=9)
    assert feature_settings_of({Knobs: given}, Knobs) is given
    store: dict[type[BaseSettings], BaseSettings] = {}
    made = feature_settings_of(store, Knobs)
    assert made.depth == 3 and store[Knobs] is made and feature_settings_of(store, Knobs) is made


async def test_the_project_is_checked_and_kept_to_a_bound_key(db: Database) -> None:
    async with call(db) as ctx:
        assert embedding_caller() == "r1/" and ctx.acting_project is None
        assert ctx.project(None) == "default" and ctx.project("", default="lab") == "lab"
        assert ctx.acting_project == "lab"
        assert ctx.project("alpha.1") == "alpha.1" and ctx.bound_project is None
        assert embedding_caller() == "r1/alpha.1"  # an unbound key shares the model per project
        assert ctx.acting_project == "alpha.1" and ctx.caller_key == "r1"  # whose rows the queue holds
        with pytest.raises(InvalidInput) as bad:
            ctx.project("-not/a name")
        assert bad.value.details["errors"][0]["field"] == "project"  # type: ignore[index]
        assert bad.value.details["errors"][0]["rule"] == "string_pattern_mismatch"  # type: ignore[index]
    async with call(db, BOUND) as ctx:
        assert embedding_caller() == "b1/team" and ctx.bound_project == "team"
        assert ctx.acting_project == "team" and ctx.caller_key == "b1"
        assert ctx.project(None) == "team" and ctx.project("team") == "team"
        with pytest.raises(Forbidden, match="bound to project 'team'") as refused:
            ctx.project("other")
        assert refused.value.code == 4030


async def test_progress_is_reported_and_a_failing_reporter_is_ignored(db: Database) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def record(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message))

    async def gone(done: float, total: float | None, message: str | None) -> None:
        raise ConnectionError("client went away")

    async with call(db, progress_fn=record) as ctx:
        await ctx.progress(1, 4, "one")
        await ctx.progress(2)
        assert ctx.settings is ctx.app.settings and ctx.embedder is ctx.app.embedder
    assert seen == [(1, 4, "one"), (2, None, None)]
    async with call(db, progress_fn=gone) as ctx:
        await ctx.progress(1)  # does not raise


async def test_slow_work_runs_with_the_reads_released(db: Database) -> None:
    async def slow() -> str:
        return "done"

    async with call(db) as ctx:
        first = await ctx.session.scalar(text("SELECT txid_current_if_assigned()"))
        assert first is None and ctx.session.in_transaction()
        assert await ctx.without_transaction(slow) == "done"
        assert not ctx.session.in_transaction()  # the connection went back to the pool
        assert await ctx.session.scalar(text("SELECT 1")) == 1  # a fresh transaction begins
    async with call(db) as ctx:
        await ctx.session.execute(text("INSERT INTO projects (id, name) VALUES (gen_random_uuid(), 'p')"))
        with pytest.raises(RuntimeError, match="after a write"):
            await ctx.without_transaction(slow)


async def test_hooks_are_kept_in_the_order_registered(db: Database) -> None:
    async def first(reply: Any) -> Any:
        return reply

    async def second(reply: Any) -> Any:
        return reply

    async def undo(session: AsyncSession) -> None:
        return None

    async with call(db) as ctx:
        ctx.after_commit(first)
        ctx.after_commit(second)
        ctx.on_rollback(undo)
        assert ctx.commit_hooks == [first, second] and ctx.rollback_steps == [undo]


async def test_only_a_write_key_off_a_readonly_endpoint_records_its_use(db: Database) -> None:
    async with call(db) as ctx:
        assert not ctx.records_use  # a read key
    async with call(db, BOUND) as ctx:
        assert ctx.records_use
        token = read_only_endpoint.set(True)
        try:
            assert not ctx.records_use  # the same key through /mcp/...,readonly
        finally:
            read_only_endpoint.reset(token)
        assert ctx.records_use
