"""app/analysis/repository.py: AnalysisRepository.upsert_records, one statement per page (chunked for
large batches) that keeps the semantics the queries rely on: one row per (model, record_id), the last
copy winning, ingest order by first appearance with rows without an id after the others, NUL
characters dropped; and AnalysisRepository.text_hits, findings ranked by BM25 under `cairn_text`
within one session: function words match nothing, accents do not matter, words found in no finding
lower the coverage, and the category and pending filters hold; value ranges (a text that only looks
like a date gives none, the transaction going on) and the other spellings of a value."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import text

from app.analysis import repository
from app.analysis.repository import FINDING_VECTORS, AnalysisRepository
from app.core.db import Database
from app.core.embeddings.lexical import forget_stats
from app.core.embeddings.repository import VectorRepository
from app.core.embeddings.vectors import vector_param
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


FINDINGS = [
    ("data_issue", "Migración del catálogo: los precios de la tienda quedaron sin impuestos"),
    ("pattern", "Refund requests doubled in January after the price increase"),
    ("pattern", "Shipping delays in the north during the storm"),
    ("general", "The weekly report of the team"),
]


async def _hits(db: Database, aid: str, query: str, **kw: Any) -> list[tuple[str, float]]:
    """(finding, coverage) of text_hits for `query` in session `aid`, best first."""
    async with db.transaction() as session:
        repo = AnalysisRepository(session)
        pid = await repo.ensure_project("default")
        terms = await repo.lexical_query(query)
        hits = await repo.text_hits(pid, aid, terms, kw.pop("model", "m"), kw.pop("k", 10), **kw)
        return [(h[2], round(terms.coverage(h[4]), 3)) for h in hits]


async def test_findings_are_ranked_by_words_within_their_session(db: Database) -> None:
    async with db.transaction() as session:
        repo = AnalysisRepository(session)
        pid = await repo.ensure_project("default")
        items = [{"category": c, "finding": f} for c, f in FINDINGS]
        ids, _ = await repo.insert_findings(pid, "words", items, True, 3600)
        await repo.insert_findings(pid, "other", items, True, 3600)
        await VectorRepository(session).store(FINDING_VECTORS, "m", ids[1:2], [vector_param([0.6, 0.8])])
    forget_stats()
    spanish, refunds, shipping, weekly = (f for _, f in FINDINGS)
    plain = await _hits(db, "words", "migracion catalogo precios", only_pending=False, category=None)
    accented = await _hits(db, "words", "Migración catálogo precios", only_pending=False, category=None)
    assert [f for f, _ in plain] == [f for f, _ in accented] == [spanish] and plain == accented
    # "the", "of", "with", "de", "la": none of them admits a finding
    assert await _hits(db, "words", "the of with de la los", only_pending=False, category=None) == []
    ranked = await _hits(db, "words", "refund requests and shipping delays", only_pending=False, category=None)
    assert {f for f, _ in ranked} == {refunds, shipping}  # "and" is no word of either
    # two of three content words in the corpus, the third in no finding: the coverage says so
    full = dict(await _hits(db, "words", "shipping delays north", only_pending=False, category=None))
    part = dict(await _hits(db, "words", "shipping delays umbrella", only_pending=False, category=None))
    assert 0 < part[shipping] < full[shipping]
    assert await _hits(db, "words", "weekly report", only_pending=False, category="pattern") == []
    assert [f for f, _ in await _hits(db, "words", "weekly report", only_pending=False, category="general")] == [weekly]
    # the refund finding has a vector of model "m": with only_pending it is left to the similarity search
    assert await _hits(db, "words", "refund requests", only_pending=True, category=None) == []
    assert [f for f, _ in await _hits(db, "words", "refund requests", only_pending=True, category=None, model="x")] == [
        refunds
    ]


async def test_value_ranges_and_other_spellings_are_read_from_the_data(db: Database) -> None:
    async with db.transaction() as s:
        repo = AnalysisRepository(s)
        pid = await repo.ensure_project("ranges")
        rows: list[tuple[str | None, dict[str, Any]]] = [
            ("1", {"n": 4, "d": "2025-03-01", "bad": "2025-02-31", "s": "lost"}),
            ("2", {"n": "10", "d": "2025-05-01T12:00:00Z", "bad": "x", "s": "Lost"}),
            ("3", {"n": "many", "d": "soon", "s": "lost"}),
        ]
        await repo.upsert_records(pid, "r", "m", 1, rows, 3600)
        lo, hi = await repo.value_range(pid, "r", "m", "n", "numeric", 100) or (None, None)
        assert (lo, hi) == (4, 10)
        span = await repo.value_range(pid, "r", "m", "d", "date", 100)
        assert span is not None and (span[0].isoformat()[:10], span[1].isoformat()[:10]) == ("2025-03-01", "2025-05-01")
        # A text that looks like a date and is none fails the cast: no range, and the transaction goes on.
        assert await repo.value_range(pid, "r", "m", "bad", "date", 100) is None
        assert await repo.value_range(pid, "r", "m", "s", "numeric", 100) is None
        assert await repo.case_variants(pid, "r", "m", "s", "LOST") == [("lost", 2), ("Lost", 1)]
        assert await repo.case_variants(pid, "r", "m", "s", "lost") == [("Lost", 1)]
        assert await repo.count_records(pid, "r", "m") == 3
