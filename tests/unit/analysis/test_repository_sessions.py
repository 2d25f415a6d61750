"""app/analysis/repository_sessions.py on a database of its own: a project's sessions found in any of
the three tables, most recently active first, with their counts; expired rows and other projects left
out; per-model and ingest views; findings newest first and page summaries in page order (10 after 2),
with their totals and a count alone for a limit of 0."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.analysis.repository import AnalysisRepository
from app.analysis.repository_sessions import SessionRepository
from app.core.config import Settings
from app.core.db import Database
from tests.support.databases import migrated_url
from tests.support.server import PgCluster

Rows = list[tuple[str | None, dict[str, Any]]]


@pytest.fixture(scope="module")
async def seeded(pg: PgCluster) -> AsyncIterator[tuple[Database, uuid.UUID]]:
    database = Database(migrated_url(pg, ["analysis"]), Settings())
    try:
        # One transaction per step: each has its own now(), so the sessions' last activity differs.
        async with database.transaction() as s:
            repo = AnalysisRepository(s)
            pid = await repo.ensure_project("lab")
            other = await repo.ensure_project("other")
            rows: Rows = [(f"b{i}", {"i": i}) for i in range(3)]
            await repo.upsert_records(pid, "oldest", "book", 1, rows, 3600)
            await repo.upsert_records(pid, "oldest", "book", 2, [("b9", {})], 3600)
            await repo.upsert_records(pid, "oldest", "author", None, [("a", {})], 3600)
            await repo.upsert_records(pid, "gone", "book", 1, [("g", {})], -1)
            await repo.upsert_records(other, "theirs", "book", 1, [("t", {})], 3600)
        async with database.transaction() as s:
            repo = AnalysisRepository(s)
            await repo.insert_findings(pid, "oldest", [{"category": "note", "finding": "first"}], False, 3600)
            summaries = [
                {"category": "page_summary", "finding": f"p{p}", "metadata": {"page": p}, "source_model": "book"}
                for p in ("10", "2", "1")
            ]
            await repo.insert_findings(pid, "oldest", summaries, True, 0)
            await repo.insert_findings(pid, "oldest", [{"category": "note", "finding": "old"}], False, -1)
        async with database.transaction() as s:
            repo = AnalysisRepository(s)
            await repo.insert_findings(pid, "oldest", [{"category": "note", "finding": "second"}], False, 3600)
            await repo.save_state(pid, "middle", "k1", "book", {"per_page": 5}, "next", 1, False, 40, 3600)
        async with database.transaction() as s:
            repo = AnalysisRepository(s)
            await repo.save_state(pid, "middle", "k2", "author", {}, None, 2, True, 2, 3600)
        async with database.transaction() as s:
            repo = AnalysisRepository(s)
            await repo.insert_findings(pid, "newest", [{"category": "idea", "finding": "fresh"}], False, 3600)
        yield database, pid
    finally:
        await database.dispose()


async def test_sessions_come_most_recent_first_with_their_counts(seeded: tuple[Database, uuid.UUID]) -> None:
    db, pid = seeded
    async with db.transaction() as s:
        repo = SessionRepository(s)
        page = await repo.sessions(pid, 10, 0)
        assert [r["analysis_id"] for r in page] == ["newest", "middle", "oldest"]  # "gone" has expired
        assert {r["total"] for r in page} == {3} and await repo.count_sessions(pid) == 3
        oldest = page[2]
        assert (oldest["records"], oldest["findings"], oldest["page_summaries"], oldest["pages_held"]) == (5, 2, 3, 2)
        assert (page[1]["records"], page[1]["findings"]) == (0, 0)  # an ingest state alone makes a session
        assert [r["analysis_id"] for r in await repo.sessions(pid, 1, 1)] == ["middle"]
        assert await repo.sessions(uuid.uuid4(), 10, 0) == [] and await repo.count_sessions(uuid.uuid4()) == 0


async def test_models_and_ingests_of_a_session(seeded: tuple[Database, uuid.UUID]) -> None:
    db, pid = seeded
    async with db.transaction() as s:
        repo = SessionRepository(s)
        models = await repo.models(pid, ["oldest", "middle"])
        assert [(m["analysis_id"], m["model"], m["records"], m["pages"]) for m in models] == [
            ("oldest", "book", 4, 2),
            ("oldest", "author", 1, 0),
        ]
        assert (models[0]["first_page"], models[0]["last_page"]) == (1, 2)
        assert await repo.models(pid, []) == []
        ingests = await repo.ingests(pid, "middle")
        assert [(i["state_key"], i["model"], i["complete"]) for i in ingests] == [
            ("k2", "author", True),
            ("k1", "book", False),
        ]
        assert ingests[1]["params"] == {"per_page": 5} and ingests[1]["total_available"] == 40


async def test_findings_and_page_summaries_with_their_totals(seeded: tuple[Database, uuid.UUID]) -> None:
    db, pid = seeded
    async with db.transaction() as s:
        repo = SessionRepository(s)
        notes, total = await repo.findings(pid, "oldest", 10)
        assert [n["finding"] for n in notes] == ["second", "first"] and total == 2  # the expired one is gone
        assert "total" not in notes[0] and "total" not in notes[1]
        one, total_one = await repo.findings(pid, "oldest", 1)
        assert [n["finding"] for n in one] == ["second"] and total_one == 2
        assert await repo.findings(pid, "oldest", 0) == ([], 2)
        summaries, count = await repo.page_summaries(pid, "oldest", 10)
        assert [p["finding"] for p in summaries] == ["p1", "p2", "p10"] and count == 3
        assert summaries[0]["persistent"] and summaries[0]["expires_at"] is None
        assert summaries[0]["source_model"] == "book"
        assert await repo.page_summaries(pid, "newest", 5) == ([], 0)
