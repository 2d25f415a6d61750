"""app/analysis/service_semantic.py with a real call context, the local ONNX model and PostgreSQL.

The judged set of tests/support/judged_analysis.py (a helpdesk's page summaries and an agent's
findings, judged queries and off-topic queries sharing an ordinary word with them) holds in both ways
semantic mode ranks, by meaning (vectors) and by words (the model unavailable): every off-topic query's
best score stays below the weakest judged top-1, the judged MRR is at least 0.95, a page summary that
answers its query passes the default threshold and no off-topic query returns anything under it.

Then what the reply says: findings whose vectors are not made yet are found by their own words at once,
labelled as matched by words and never counted as similar; when nothing passes, the message names the
candidates, the best score, the threshold and the argument to change.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.analysis.schemas import QueryIn, QueryOut
from app.analysis.service_query import query
from app.analysis.service_semantic import (
    THRESHOLD_SHARE,
    WORD_THRESHOLD,
    Thresholds,
    _Found,
    _message,
    default_threshold,
    thresholds_for,
)
from app.core.config import Settings
from app.core.context import Principal
from app.core.db import Database
from app.core.embeddings.calibration import LOCAL
from app.core.embeddings.lexical import forget_stats
from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.embeddings.provider import Calibration, EmbeddingProvider
from tests.support.calls import service_call, unreachable_embedder
from tests.support.databases import migrated_url
from tests.support.judged_analysis import (
    DEMO_SUMMARY_QUERIES,
    JUDGED,
    OFF_TOPIC,
    SUMMARY_QUERIES,
    demo_page_summaries,
    load,
    ranking,
    reciprocal_rank,
    store_findings,
)
from tests.support.server import PgCluster

USER = Principal(key_id="w", name="writer", scopes=frozenset({"read", "write"}))
PROJECT, AID = "judged", "helpdesk"
LOCAL_MODEL = LocalOnnxEmbedder()


@pytest.fixture(scope="module")
async def db(pg: PgCluster) -> AsyncIterator[tuple[Database, dict[int, str]]]:
    database = Database(migrated_url(pg, ["analysis"]), Settings())
    try:
        keys = await load(database, PROJECT, AID, LOCAL_MODEL)
        keys.update(await store_findings(database, PROJECT, "demo", demo_page_summaries(), LOCAL_MODEL))
        forget_stats()
        yield database, keys
    finally:
        await database.dispose()


async def ask(db: Database, embedder: EmbeddingProvider, **kw: Any) -> QueryOut:
    args = QueryIn.model_validate({"project": PROJECT, "analysis_id": AID, "mode": "semantic", **kw})
    async with service_call(db, USER, embedder=embedder) as ctx:
        return await query(ctx, args)


def test_the_default_threshold_lies_halfway_between_unrelated_and_related_texts() -> None:
    assert THRESHOLD_SHARE == 0.5
    assert default_threshold(LOCAL) == 0.45
    assert default_threshold(Calibration(unrelated=0.65, related=0.85)) == 0.75
    assert default_threshold(Calibration(unrelated=0.3, related=0.2)) == 0.3  # a degenerate calibration


def test_the_threshold_suggested_when_nothing_passes_is_never_below_zero() -> None:
    args = QueryIn(analysis_id="a", mode="semantic", query="q", category="notes")
    found = _Found([(1, "notes", "t", {}, -0.05), (2, "notes", "u", {}, -0.1)], [], Thresholds(0.45, 0.3, True))
    assert _message(args, found, 0, 0, True) == (
        "0 finding(s) in category 'notes' with similarity >= 0.45 (default) (of 2 nearest). Nothing reached "
        "similarity 0.45: the best of 2 candidate(s) scored -0.050; pass threshold 0 to see them."
    )


async def test_a_model_without_a_declared_calibration_gets_the_local_figures_while_unreachable() -> None:
    database = Database("postgresql+asyncpg://unused/unused", Settings())
    args = QueryIn(analysis_id="a", mode="semantic", query="q")
    async with service_call(database, USER, embedder=unreachable_embedder()) as ctx:
        assert await thresholds_for(ctx, args, reachable=False) == Thresholds(0.45, WORD_THRESHOLD, True)
        given = QueryIn(analysis_id="a", mode="semantic", query="q", threshold=0.2)
        assert await thresholds_for(ctx, given, reachable=False) == Thresholds(0.2, 0.2, False)


@pytest.mark.parametrize("way", ["meaning", "words"])
async def test_the_judged_set_ranks_and_off_topic_queries_stay_below(
    db: tuple[Database, dict[int, str]], way: str
) -> None:
    database, keys = db
    embedder = LOCAL_MODEL if way == "meaning" else unreachable_embedder()
    tops: list[float] = []
    rr: list[float] = []
    for q, relevant in JUDGED:
        out = await ask(database, embedder, query=q, threshold=0.0, top_k=20)
        hits = out.findings or []
        assert hits, q
        assert all((h.matched_by == "words") == (way == "words") for h in hits)
        rr.append(reciprocal_rank(ranking(hits, keys), relevant))
        tops.append(hits[0].score)
        print(f"{way} judged {hits[0].score:.3f} rr {rr[-1]:.2f} {q!r} -> {ranking(hits, keys)[:3]}")
    off: list[float] = []
    for q in OFF_TOPIC:
        out = await ask(database, embedder, query=q, threshold=0.0, top_k=20)
        off.append(out.best_score or 0.0)
        print(f"{way} off-topic {off[-1]:.3f} {q!r} -> {ranking(out.findings or [], keys)[:2]}")
    mrr = sum(rr) / len(rr)
    print(f"{way}: MRR {mrr:.3f}, weakest judged top-1 {min(tops):.3f}, best off-topic {max(off):.3f}")
    assert mrr >= 0.95
    assert max(off) < min(tops)


@pytest.mark.parametrize("way", ["meaning", "words"])
async def test_at_the_default_threshold_answers_pass_and_off_topic_queries_get_nothing(
    db: tuple[Database, dict[int, str]], way: str
) -> None:
    database, keys = db
    embedder = LOCAL_MODEL if way == "meaning" else unreachable_embedder()
    for q, relevant in JUDGED:
        out = await ask(database, embedder, query=q)
        assert out.word_threshold == WORD_THRESHOLD
        assert out.threshold == (0.45 if way == "meaning" else None)
        assert ranking(out.findings or [], keys)[0] in relevant, q
    for q, relevant in SUMMARY_QUERIES:  # the page summaries that answer pass the default
        out = await ask(database, embedder, query=q)
        assert relevant <= set(ranking(out.findings or [], keys)), q
    if way == "meaning":  # the demo upstream's book pages, for questions they answer
        for q in DEMO_SUMMARY_QUERIES:
            out = await ask(database, embedder, query=q, analysis_id="demo")
            assert ranking(out.findings or [], keys)[:1] in (["book p1"], ["book p2"], ["book p3"]), q
    for q in OFF_TOPIC:
        out = await ask(database, embedder, query=q)
        assert out.total == 0 and out.findings == [], (q, out.findings)
        assert out.best_score is None or "Nothing reached " in out.message, out.message
