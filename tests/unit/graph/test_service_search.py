"""app/graph/service_search.py: which treatment a search gets, what counts as an answer at all, and a
search with a real call context (the model unreachable: words alone) that leaves archived entities
and noise out and logs its event."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from app.core import migrations
from app.core.config import Settings
from app.core.context import AppState, CallContext, Principal
from app.core.db import Database
from app.core.embedding import build_embedder
from app.core.registry import Registry
from app.graph import service
from app.graph.config import GraphSettings
from app.graph.schemas import CreateEntitiesIn, EntityIn, ProjectIn, SearchSemanticIn
from app.graph.service_common import BASELINE, LIMBIC
from app.graph.service_search import _an_answer, _treatment, search_semantic
from app.graph.service_stats import graph_stats
from tests.support.server import PgCluster, free_port

WRITER = Principal(key_id="k1", name="writer", scopes=frozenset({"write"}))
S = GraphSettings(semantic_floor=0.3)


def test_a_requested_treatment_wins_and_auto_follows_the_ratio() -> None:
    assert _treatment("limbic", 0.0) == LIMBIC and _treatment("baseline", 1.0) == BASELINE
    assert {_treatment("auto", 1.0) for _ in range(50)} == {LIMBIC}
    assert {_treatment("auto", 0.0) for _ in range(50)} == {BASELINE}


def test_an_answer_has_a_query_word_or_is_close_enough_in_meaning() -> None:
    assert _an_answer(0.0, 0.2, by_meaning=False, s=S)  # a query word in its text
    assert _an_answer(0.3, 0.0, by_meaning=True, s=S)  # at the floor
    assert not _an_answer(0.29, 0.0, by_meaning=True, s=S)  # a nearest neighbour, not an answer
    assert not _an_answer(0.9, 0.0, by_meaning=False, s=S)  # no query vector: a cosine means nothing


@pytest.fixture(scope="module")
async def db(pg: PgCluster) -> AsyncIterator[Database]:
    url = pg.handle.url(pg.new_database())
    await migrations.upgrade_async(url, ["graph"])
    database = Database(url, Settings())
    try:
        yield database
    finally:
        await database.dispose()


@asynccontextmanager
async def call(db: Database) -> AsyncIterator[CallContext]:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing answers: the search runs on words alone
    embedder = build_embedder("openai", model="text-embedding-3-small", dimension=384, base_url=url, timeout=2)
    state = AppState(Settings(), db, embedder, Registry(), feature_settings={GraphSettings: S})
    async with db.transaction() as session:
        yield CallContext(session=session, principal=WRITER, app=state, request_id="t", transport="test")


async def test_a_search_on_words_leaves_out_noise_and_archived_entities(db: Database) -> None:
    entities = [
        EntityIn(name="River Thames", entityType="place", observations=["a river through London"]),
        EntityIn(name="River Styx", entityType="myth", observations=["a river of the underworld"], status="archivado"),
        EntityIn(name="Mount Fuji", entityType="place", observations=["a volcano"]),
    ]
    async with call(db) as ctx:
        await service.create_entities(ctx, CreateEntitiesIn(project="geo", entities=entities))
    async with call(db) as ctx:
        out = await search_semantic(ctx, SearchSemanticIn(project="geo", query="river", treatment="baseline"))
        assert out.engine == "text" and out.treatment == "baseline" and out.event_id > 0
        assert [h.name for h in out.results] == ["River Thames"]  # the archived one and the volcano left out
        hit = out.results[0]
        assert hit.rank == hit.baseline_rank == 1 and hit.cosine_sim == 0.0 and hit.text_score > 0
        assert hit.observations == ["a river through London"]
        every = await search_semantic(
            ctx, SearchSemanticIn(project="geo", query="river", treatment="limbic", include_archived=True)
        )
        assert {h.name for h in every.results} == {"River Thames", "River Styx"} and every.treatment == "limbic"
        assert (await search_semantic(ctx, SearchSemanticIn(project="geo", query="glacier"))).results == []
        nowhere = await search_semantic(ctx, SearchSemanticIn(project="atlantis", query="river"))
        assert nowhere.results == [] and nowhere.event_id == 0 and nowhere.engine == "none"
    async with call(db) as ctx:
        assert (await graph_stats(ctx, ProjectIn(project="geo"))).search_events == 3  # atlantis logs nothing
