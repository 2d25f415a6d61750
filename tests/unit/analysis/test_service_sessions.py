"""app/analysis/service_sessions.py with a real call context on a database of its own: a project's
sessions paged with what each holds, one session in detail (models, ingests, findings, page summaries,
long findings cut), expired rows no longer part of a session, and a bound key kept to its project."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager

import pytest

from app.analysis.repository import AnalysisRepository
from app.analysis.schemas_sessions import SessionIn, SessionsIn
from app.analysis.service_sessions import FINDING_CHARS, session, sessions
from app.core.config import Settings
from app.core.context import CallContext, Principal
from app.core.db import Database
from app.core.errors import Forbidden, NotFound
from tests.support.calls import service_call
from tests.support.databases import migrated_url
from tests.support.server import PgCluster

READER = Principal(key_id="r", name="reader", scopes=frozenset({"read"}))
BOUND = Principal(key_id="b", name="bound", scopes=frozenset({"read"}), project="elsewhere")


@pytest.fixture(scope="module")
async def db(pg: PgCluster) -> AsyncIterator[Database]:
    database = Database(migrated_url(pg, ["analysis"]), Settings())
    try:
        async with database.transaction() as s:
            repo = AnalysisRepository(s)
            pid = await repo.ensure_project("lab")
            for page in (1, 2):
                rows: list[tuple[str | None, dict[str, object]]] = [(f"{page}-{i}", {"i": i}) for i in range(3)]
                await repo.upsert_records(pid, "books", "book", page, rows, 3600)
            await repo.upsert_records(pid, "books", "author", 1, [("a1", {"name": "Ada"})], 3600)
            await repo.save_state(pid, "books", "k1", "book", {"model": "book", "per_page": 3}, None, 2, True, 6, 3600)
            notes = [
                {"category": "note", "finding": "short"},
                {"category": "note", "finding": "x" * (FINDING_CHARS + 5)},
            ]
            await repo.insert_findings(pid, "books", notes, False, 3600)
            await repo.insert_findings(pid, "books", [{"category": "page_summary", "finding": "p1"}], False, 3600)
            await repo.upsert_records(pid, "recent", "book", 1, [("r", {})], 3600)
            await repo.upsert_records(pid, "expired", "book", 1, [("e", {})], -1)
        yield database
    finally:
        await database.dispose()


def call(db: Database, principal: Principal = READER) -> AbstractAsyncContextManager[CallContext]:
    return service_call(db, principal)


async def test_a_projects_sessions_are_paged_with_what_each_holds(db: Database) -> None:
    async with call(db) as ctx:
        page = await sessions(ctx, SessionsIn(project="lab"))
        assert page.total == 2 and page.next_offset is None  # the expired session is gone
        books = next(s for s in page.sessions if s.analysis_id == "books")
        assert (books.records, books.findings, books.page_summaries, books.pages_held) == (7, 2, 1, 3)
        assert {(m.model, m.records, m.pages) for m in books.models} == {("book", 6, 2), ("author", 1, 1)}
        first = await sessions(ctx, SessionsIn(project="lab", limit=1))
        assert len(first.sessions) == 1 and first.next_offset == 1 and first.total == 2
        past = await sessions(ctx, SessionsIn(project="lab", offset=5))
        assert past.sessions == [] and past.total == 2 and past.next_offset is None
        empty = await sessions(ctx, SessionsIn(project="nothing-here"))
        assert (empty.sessions, empty.total) == ([], 0)
        assert page.tokens > 0


async def test_one_session_in_detail(db: Database) -> None:
    async with call(db) as ctx:
        books = await session(ctx, SessionIn(project="lab", analysis_id="books"))
        counts = await session(ctx, SessionIn(project="lab", analysis_id="books", findings_limit=0))
    assert books.records == 7 and {m.model for m in books.models} == {"book", "author"}
    [ingest] = books.ingests
    assert (ingest.model, ingest.mode, ingest.last_page, ingest.complete, ingest.total_available) == (
        "book",
        "top_level",
        2,
        True,
        6,
    )
    assert books.findings_total == 2 and books.page_summaries_total == 1
    cut = next(f for f in books.findings if f.finding.startswith("x"))
    assert cut.finding == "x" * FINDING_CHARS + "…" and not cut.persistent
    assert [f.finding for f in books.page_summaries] == ["p1"]
    assert books.message.startswith("Analysis 'books': 7 record(s) of 2 model(s), 2 finding(s), 1 page summary")
    assert counts.findings == [] and counts.findings_total == 2


async def test_missing_expired_and_other_projects_sessions_are_not_found(db: Database) -> None:
    async with call(db) as ctx:
        for aid in ("expired", "never-used"):
            with pytest.raises(NotFound, match=f"No analysis session '{aid}'"):
                await session(ctx, SessionIn(project="lab", analysis_id=aid))
        with pytest.raises(NotFound):
            await session(ctx, SessionIn(project="no-project", analysis_id="books"))
    async with call(db, BOUND) as ctx:
        with pytest.raises(Forbidden):
            await sessions(ctx, SessionsIn(project="lab"))
        assert (await sessions(ctx, SessionsIn())).project == "elsewhere"
