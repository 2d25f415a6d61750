"""app/analysis/service_query.py with a real call context on a database of its own: describe's table
of fields and its examples, aggregate's groups, filter's pages, sample's strata and date window, the
model a query reads (several models need naming), the arguments each mode refuses, conditions that
cannot match reported as warnings, semantic mode over findings whose vectors are not made yet (found by
their own words at once, labelled so and never counted as similar), and semantic replies that say why
nothing passed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from app.analysis.repository import AnalysisRepository
from app.analysis.schemas import FindingIn, ProximityIn, QueryIn, QueryOut, StoreIn
from app.analysis.service import store
from app.analysis.service_query import query
from app.core.config import Settings
from app.core.context import CallContext, Principal
from app.core.db import Database
from app.core.embeddings.lexical import forget_stats
from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.embeddings.provider import EmbeddingProvider
from app.core.errors import CairnError, InvalidInput, NotFound
from tests.support.calls import service_call, unreachable_embedder
from tests.support.databases import migrated_url
from tests.support.judged_analysis import load
from tests.support.server import PgCluster

READER = Principal(key_id="r", name="reader", scopes=frozenset({"read"}))
WRITER = Principal(key_id="w", name="writer", scopes=frozenset({"read", "write"}))
STATUSES = ("open", "closed", "void")


def order(i: int) -> dict[str, Any]:
    return {"id": i, "status": STATUSES[i % 3], "amount": i * 10, "placed": f"2026-01-{i + 1:02d}"}


@pytest.fixture(scope="module")
async def db(pg: PgCluster) -> AsyncIterator[Database]:
    database = Database(migrated_url(pg, ["analysis"]), Settings())
    try:
        async with database.transaction() as s:
            repo = AnalysisRepository(s)
            pid = await repo.ensure_project("lab")
            await repo.upsert_records(pid, "orders", "order", 1, [(str(i), order(i)) for i in range(12)], 3600)
            await repo.upsert_records(pid, "mixed", "order", 1, [("1", order(1))], 3600)
            await repo.upsert_records(pid, "mixed", "customer", 1, [("c", {"name": "Ada"})], 3600)
            notes: list[dict[str, Any]] = [
                {"category": "refunds", "finding": "refund requests doubled in January", "metadata": {"n": 2}},
                {"category": "refunds", "finding": "refund " + "x" * 700},
                {"category": "shipping", "finding": "shipping delays in the north"},
            ]
            await repo.insert_findings(pid, "orders", notes, False, 3600)
        yield database
    finally:
        await database.dispose()


def call(db: Database) -> AbstractAsyncContextManager[CallContext]:
    return service_call(db, READER)


async def ask(db: Database, **kw: Any) -> QueryOut:
    async with call(db) as ctx:
        return await query(ctx, QueryIn.model_validate({"project": "lab", "analysis_id": "orders", **kw}))


async def refused(db: Database, error: type[CairnError], **kw: Any) -> CairnError:
    with pytest.raises(error) as caught:
        await ask(db, **kw)
    return caught.value


def field_of(err: CairnError) -> str:
    return str(err.details["errors"][0]["field"])  # type: ignore[index]


async def test_describe_lists_fields_values_and_examples(db: Database) -> None:
    out = await ask(db, mode="describe")
    assert out.total == 12 and out.message == "1 model(s): order (12)"
    text = out.text or ""
    assert text.startswith("### order: 12 records\n| field | type | notes |")
    assert "| status | string | values: " in text and all(s in text for s in STATUSES)
    assert "| amount | number |" in text and "Findings stored: 3" in text
    assert 'aggregate: {"group_by": "status"}' in text
    # Examples come from the data: its most common status, the middle of amount's range (0-110), and a
    # date window around the middle of placed (2026-01-01..12).
    assert 'filter: {"where": {"status": "closed", "amount": {"$gte": 55}}}' in text
    assert '"origin": "2026-01-06", "window": "6 days", "bucket": "1 day"' in text
    assert (await ask(db, mode="describe", analysis_id="mixed", model="customer")).total == 1
    assert "no" in (await refused(db, NotFound, mode="describe", model="ghost")).message.lower()
    assert field_of(await refused(db, InvalidInput, mode="describe", where={"a": 1})) == "where"


async def test_aggregate_counts_groups_and_cuts_to_the_limit(db: Database) -> None:
    out = await ask(db, mode="aggregate", group_by="status")
    assert out.model == "order" and out.total == 12 and not out.truncated and out.warnings is None
    assert {(g.value, g.count, g.percent) for g in out.groups or []} == {(s, 4, 33.3) for s in STATUSES}
    top = await ask(db, mode="aggregate", group_by="status", limit=2)
    assert len(top.groups or []) == 2 and top.truncated and "top 2 of 3 shown" in top.message
    where = await ask(db, mode="aggregate", group_by="status", where={"amount": {"$gte": 60}})
    assert where.total == 6
    ghost = await ask(db, mode="aggregate", group_by="colour")
    assert ghost.warnings == ["group_by: no order record has a field 'colour' (mode describe lists the fields)"]
    assert field_of(await refused(db, InvalidInput, mode="aggregate")) == "group_by"
    assert field_of(await refused(db, InvalidInput, mode="aggregate", group_by="status", query="x")) == "query"


async def test_filter_pages_rows_and_warns_when_nothing_can_match(db: Database) -> None:
    first = await ask(db, mode="filter", where={"status": "open"}, limit=3)
    assert first.total == 4 and [r["id"] for r in first.rows or []] == [0, 3, 6]
    assert first.truncated and first.message == "4 matching record(s); showing 3 (next offset 3)."
    rest = await ask(db, mode="filter", where={"status": "open"}, limit=3, offset=3)
    assert [r["id"] for r in rest.rows or []] == [9] and not rest.truncated
    wrong = await ask(db, mode="filter", where={"amount": "10"})
    assert wrong.total == 0 and wrong.warnings == [
        "where.amount: 'amount' holds no string values, so this exact match finds nothing"
    ]
    dates = await ask(db, mode="filter", where={"placed": {"$gte": "2026-01-11"}})
    assert [r["id"] for r in dates.rows or []] == [10, 11]
    assert field_of(await refused(db, InvalidInput, mode="filter")) == "where"


async def test_sample_spreads_over_strata_and_a_date_window(db: Database) -> None:
    spread = await ask(db, mode="sample", sample_size=6, stratify_by="status")
    assert spread.total == 12 and len(spread.rows or []) == 6 and "across 3 strata" in spread.message
    assert {r["status"] for r in spread.rows or []} == set(STATUSES)
    window = ProximityIn(field="placed", origin="2026-01-05", window="2 days")
    near = await ask(db, mode="sample", sample_size=20, proximity=window.model_dump())
    assert sorted(r["id"] for r in near.rows or []) == [2, 3, 4, 5, 6] and near.total == 5
    wrong = ProximityIn(field="amount", origin="2026-01-05", window="2 days")
    warned = await ask(db, mode="sample", proximity=wrong.model_dump())
    assert warned.warnings and "'amount' holds no ISO dates" in warned.warnings[0]
    assert field_of(await refused(db, InvalidInput, mode="sample", group_by="status")) == "group_by"


async def test_the_model_read_must_be_named_when_a_session_holds_several(db: Database) -> None:
    several = await refused(db, InvalidInput, mode="filter", analysis_id="mixed", where={"name": "Ada"})
    assert field_of(several) == "model" and several.suggestions == ["Models in this session: order, customer"]
    named = await ask(db, mode="filter", analysis_id="mixed", model="customer", where={"name": "Ada"})
    assert named.total == 1 and named.model == "customer"
    await refused(db, NotFound, mode="filter", model="invoice", where={"a": 1})
    await refused(db, NotFound, mode="aggregate", analysis_id="never", group_by="status")
    await refused(db, NotFound, mode="describe", project="elsewhere")


async def test_semantic_mode_finds_findings_by_text_while_their_vectors_wait(db: Database) -> None:
    out = await ask(db, mode="semantic", query="refund", category="refunds")
    hits = out.findings or []
    assert out.total == 2 and {h.category for h in hits} == {"refunds"}
    assert all(h.embedding == "pending" and h.matched_by == "words" for h in hits)
    assert "2 finding(s) in category 'refunds' matched by their words" in out.message
    long = next(h for h in hits if h.finding.startswith("refund x"))
    assert long.finding == "refund " + "x" * 700 and not out.truncated and out.cut is None  # whole: the list is cut
    assert field_of(await refused(db, InvalidInput, mode="semantic")) == "query"
    assert field_of(await refused(db, InvalidInput, mode="semantic", query="x", group_by="a")) == "group_by"
    await refused(db, NotFound, mode="semantic", analysis_id="never", query="refund")


@pytest.fixture(scope="module")
async def helpdesk(pg: PgCluster) -> AsyncIterator[Database]:
    """The judged helpdesk set twice: session `embedded` with the local model's vectors, session
    `waiting` without any (as right after a store, before the queue made them)."""
    database = Database(migrated_url(pg, ["analysis"]), Settings())
    try:
        await load(database, "lab", "embedded", LocalOnnxEmbedder())
        await load(database, "lab", "waiting", None)
        yield database
    finally:
        await database.dispose()


async def semantic(db: Database, aid: str, embedder: EmbeddingProvider | None = None, **kw: Any) -> QueryOut:
    args = QueryIn.model_validate({"project": "lab", "analysis_id": aid, "mode": "semantic", **kw})
    async with service_call(db, READER, embedder=embedder) as ctx:
        return await query(ctx, args)


async def stored(db: Database, aid: str, text: str) -> int:
    async with service_call(db, WRITER) as ctx:
        out = await store(ctx, StoreIn(project="lab", analysis_id=aid, findings=[FindingIn(finding=text)]))
    forget_stats()
    return out.ids[0]


async def test_a_finding_stored_moments_ago_is_found_by_its_own_words_and_never_called_similar(
    helpdesk: Database,
) -> None:
    fid = await stored(helpdesk, "embedded", "Invoices in Swiss francs were labelled as euros by the nightly export")
    out = await semantic(helpdesk, "embedded", query="Swiss francs labelled as euros by the export")
    hits = out.findings or []
    new = [h for h in hits if h.id == fid]
    assert len(new) == 1 and new[0].matched_by == "words" and new[0].embedding == "pending", hits
    assert new[0].score >= 0.3 and out.threshold == 0.45 and out.word_threshold == 0.3
    similar = [h for h in hits if h.matched_by is None]
    assert all(h.score >= 0.45 and h.embedding is None for h in similar)
    assert out.message.startswith(f"{len(similar)} finding(s) with similarity >= 0.45 (default) (of ")
    more = "more " if similar else ""
    assert out.message.endswith(
        f" 1 {more}finding(s) matched by their words (word relevance >= 0.3), not by similarity: "
        "their vectors are not made yet."
    ), out.message


async def test_while_no_vector_is_made_function_words_match_nothing_and_the_stored_finding_comes_first(
    helpdesk: Database,
) -> None:
    fid = await stored(helpdesk, "waiting", "Invoices in Swiss francs were labelled as euros by the nightly export")
    out = await semantic(helpdesk, "waiting", query="what about the francs in the export of the invoices", top_k=5)
    hits = out.findings or []
    assert hits and hits[0].id == fid and hits[0].score > 0.8
    assert all(h.matched_by == "words" and h.embedding == "pending" for h in hits)
    assert out.threshold is None or out.threshold == 0.45
    assert out.message == (
        f"No finding has a vector yet. {len(hits)} finding(s) matched by their words (word relevance >= 0.3 "
        "(default)), not by similarity: their vectors are not made yet."
    )
    # words the session never uses rank nothing, and the reply says so
    none = await semantic(helpdesk, "waiting", query="the of with xq zvbnm plorf")
    assert none.total == 0 and none.candidates == 0 and none.best_score is None
    assert none.message == "No finding has a vector yet. Nothing to rank: no finding shares a word with the query."


async def test_when_nothing_passes_the_reply_names_candidates_best_score_threshold_and_argument(
    helpdesk: Database,
) -> None:
    out = await semantic(helpdesk, "embedded", query="status of my passport renewal")
    assert out.total == 0 and out.findings == [] and out.threshold == 0.45
    best, n = out.best_score or 0.0, out.candidates or 0
    assert n > 0 and 0 < best < 0.45
    lower = int(best * 100) / 100
    assert out.message == (
        f"0 finding(s) with similarity >= 0.45 (default) (of {n - 0} nearest). Nothing reached similarity 0.45: "
        f"the best of {n} candidate(s) scored {best:.3f}; pass threshold {lower:g} (or lower) to see them."
    )
    shown = await semantic(helpdesk, "embedded", query="status of my passport renewal", threshold=lower)
    assert shown.total and (shown.findings or [])[0].score == best
    words = await semantic(helpdesk, "embedded", embedder=unreachable_embedder(), query="status of my passport renewal")
    assert words.total == 0 and words.threshold is None and words.word_threshold == 0.3
    best = words.best_score or 0.0
    assert 0 < best < 0.3 and words.message == (
        "The embedding model is unavailable: nothing was compared by similarity. Nothing reached word relevance "
        f"0.3: the best of {words.candidates} candidate(s) scored {best:.3f}; pass threshold "
        f"{int(best * 100) / 100:g} (or lower) to see them."
    )
