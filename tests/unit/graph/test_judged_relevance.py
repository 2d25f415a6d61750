"""The graph's relevance floor on a judged graph (tests/support/judged_graph.py), with the real model and
a real database: in both treatments every off-topic query scores below the weakest judged answer (the
defaults return nothing for them and count no access), the judged answers come first (MRR), and
accented and unaccented forms of a query find the same entity."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest
from sqlalchemy import text

from app.core.config import Settings
from app.core.context import CallContext, Principal
from app.core.db import Database
from app.core.embeddings.lexical import forget_stats
from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.embeddings.queue import EmbeddingQueue
from app.graph import service
from app.graph.schemas import CreateEntitiesIn, EntityIn, SearchSemanticIn, SearchSemanticOut
from app.graph.service_common import EMBEDDING_TARGETS
from app.graph.service_search import search_semantic
from tests.support.calls import local_model_fixture, service_call
from tests.support.databases import database_fixture
from tests.support.judged_graph import ACCENT_PAIRS, ENTITIES, JUDGED, OFF_TOPIC

pytestmark = pytest.mark.slow

WRITER = Principal(key_id="k1", name="writer", scopes=frozenset({"write"}))
PROJECT = "judged"
TREATMENTS = ("limbic", "baseline")

db = database_fixture(["graph"])


local = local_model_fixture()


def call(db: Database, embedder: LocalOnnxEmbedder) -> AbstractAsyncContextManager[CallContext]:
    return service_call(db, WRITER, embedder=embedder)


@pytest.fixture(scope="module")
async def judged(db: Database, local: LocalOnnxEmbedder) -> Database:
    """The judged graph, every entity embedded."""
    entities = [EntityIn(name=n, entityType=t, observations=obs) for n, t, obs in ENTITIES]
    async with call(db, local) as ctx:
        await service.create_entities(ctx, CreateEntitiesIn(project=PROJECT, entities=entities))
    stats = await EmbeddingQueue(db, local, EMBEDDING_TARGETS, Settings()).drain(120)
    assert stats.depth == 0
    forget_stats()
    return db


async def search(db: Database, local: LocalOnnxEmbedder, query: str, **args: object) -> SearchSemanticOut:
    """`search_semantic` with its write part (the access counters), as the executor runs it."""
    async with call(db, local) as ctx:
        out = await search_semantic(ctx, SearchSemanticIn.model_validate({"project": PROJECT, "query": query, **args}))
        for step in ctx.primary_steps:
            out = await step(ctx.session, out)
    return out


def score(out: SearchSemanticOut, treatment: str) -> float:
    """The score the reply is ranked by: the limbic score, or the relevance in the baseline order."""
    if not out.results:
        return 0.0
    return out.results[0].score


async def accesses(db: Database) -> tuple[int, int]:
    """Accesses and co-occurrences counted so far."""
    async with db.transaction() as session:
        hits = await session.scalar(text("SELECT coalesce(sum(access_count), 0) FROM graph_entity_access"))
        pairs = await session.scalar(text("SELECT coalesce(sum(co_count), 0) FROM graph_cooccurrences"))
        return int(hits), int(pairs)


async def test_off_topic_scores_below_every_judged_answer_and_earns_no_access(
    judged: Database, local: LocalOnnxEmbedder
) -> None:
    for treatment in TREATMENTS:
        off = {q: await search(judged, local, q, treatment=treatment) for q in OFF_TOPIC}
        assert await accesses(judged) == (0, 0), {q: [h.name for h in o.results] for q, o in off.items()}
        for q, out in off.items():
            assert out.results == [] and out.notice and "No entity passed the relevance floor" in out.notice, q
        best_off = max(score(o, treatment) for o in off.values())
        ranks, top1 = [], []
        for query, answer in JUDGED:
            out = await search(judged, local, query, treatment=treatment)
            names = [h.name for h in out.results]
            ranks.append(names.index(answer) + 1 if answer in names else None)
            top1.append(score(out, treatment))
        mrr = sum(1 / r for r in ranks if r) / len(JUDGED)
        assert mrr >= 0.95, (treatment, list(zip(JUDGED, ranks, strict=True)))
        assert best_off < min(top1), (treatment, best_off, min(top1))
        assert (await accesses(judged))[0] > 0  # the answers are counted
        async with judged.transaction() as session:  # the next treatment starts from no history
            await session.execute(text("DELETE FROM graph_entity_access"))
            await session.execute(text("DELETE FROM graph_cooccurrences"))


async def test_accented_and_unaccented_queries_find_the_same_entity(judged: Database, local: LocalOnnxEmbedder) -> None:
    for accented, plain in ACCENT_PAIRS:
        for mode in ({}, {"semantic_floor": 1.0}):  # hybrid, and by words alone (no cosine passes 1.0)
            a = await search(judged, local, accented, treatment="baseline", explain=True, **mode)
            b = await search(judged, local, plain, treatment="baseline", explain=True, **mode)
            assert a.results and b.results, (accented, mode)
            assert a.results[0].name == b.results[0].name, (accented, mode)
            if mode:
                assert a.results[0].text_score == pytest.approx(b.results[0].text_score)
                assert a.results[0].matched_by == "text"
