"""app/analysis/repository.py: AnalysisRepository.upsert_records, one statement per page (chunked for
large batches) that keeps the semantics the queries rely on: one row per (model, record_id), the last
copy winning, ingest order by first appearance with rows without an id after the others, NUL
characters dropped."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import text

from app.analysis import repository
from app.analysis.repository import AnalysisRepository
from app.core.db import Database
from tests.support.databases import database_fixture

Rows = list[tuple[str | None, dict[str, Any]]]


db = database_fixture(["analysis"])


async def _upsert(db: Database, aid: str, pages: list[Rows]) -> tuple[list[int], list[tuple[Any, ...]]]:
    """Store each page in turn (page numbers from 1); returns the counts and the rows in ingest order."""
    counts = []
    async with db.transaction() as session:
        repo = AnalysisRepository(session)
        pid = await repo.ensure_project("default")
        for n, rows in enumerate(pages, start=1):
            counts.append(await repo.upsert_records(pid, aid, "book", n, rows, 3600))
    async with db.transaction() as session:
        result = await session.execute(
            text(
                "SELECT id, record_id, page, data, expires_at > now() + interval '59 minutes' AS ttl_ok "
                "FROM analysis_records WHERE analysis_id = :aid ORDER BY id"
            ),
            {"aid": aid},
        )
        return counts, [tuple(r) for r in result]


def _pages() -> list[Rows]:
    first: Rows = [
        ("1", {"id": 1, "title": "a"}),
        (None, {"note": "no id, first"}),
        ("2", {"id": 2, "title": "b"}),
        ("1", {"id": 1, "title": "a, second copy"}),
        (None, {"note": "no id, second", "bad": "x\x00y", "nested": {"k\x00": ["\x00"]}}),
        ("3", {"id": 3, "title": "c"}),
    ]
    second: Rows = [("2", {"id": 2, "title": "b again"}), ("4", {"id": 4, "title": "d"})]
    return [first, second]


def _check(counts: list[int], rows: list[tuple[Any, ...]]) -> None:
    assert counts == [5, 2]  # distinct ids plus rows without one
    got = [(rid, page, data) for _, rid, page, data, _ in rows]
    assert got == [
        ("1", 1, {"id": 1, "title": "a, second copy"}),  # first position, last copy
        ("2", 2, {"id": 2, "title": "b again"}),  # replaced in place by page 2: same row, new page
        ("3", 1, {"id": 3, "title": "c"}),
        (None, 1, {"note": "no id, first"}),  # rows without an id after the others, in their order
        (None, 1, {"note": "no id, second", "bad": "xy", "nested": {"k": [""]}}),
        ("4", 2, {"id": 4, "title": "d"}),
    ]
    assert all(ok for *_, ok in rows)


async def test_one_row_per_id_last_copy_wins_ingest_order_kept(db: Database) -> None:
    counts, rows = await _upsert(db, f"a{uuid.uuid4().hex[:8]}", _pages())
    _check(counts, rows)


async def test_a_batch_larger_than_one_statement_gives_the_same_rows(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(repository, "UPSERT_CHUNK", 2)
    counts, rows = await _upsert(db, f"a{uuid.uuid4().hex[:8]}", _pages())
    _check(counts, rows)


async def test_an_empty_page_stores_nothing(db: Database) -> None:
    counts, rows = await _upsert(db, f"a{uuid.uuid4().hex[:8]}", [[]])
    assert counts == [0] and rows == []
