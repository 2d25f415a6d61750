"""app/graph/service_reflections.py with a real call context on a database of its own (the model
unreachable, so searches rank on words alone): reflections about an entity, a session or the graph,
their vectors queued, and the search's filters and score."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest

from app.core.context import CallContext, Principal
from app.core.db import Database
from app.core.embeddings.calls import QueuedVectors
from app.core.errors import InvalidInput, NotFound
from app.graph import service
from app.graph.config import GraphSettings
from app.graph.schemas import AddReflectionIn, CreateEntitiesIn, EntityIn, SearchReflectionsIn
from app.graph.service_reflections import add_reflection, search_reflections
from tests.support.calls import service_call, unreachable_embedder
from tests.support.databases import database_fixture

WRITER = Principal(key_id="k1", name="writer", scopes=frozenset({"write"}))
SETTINGS = GraphSettings(text_weight=0.5)


db = database_fixture(["graph"])


def call(db: Database) -> AbstractAsyncContextManager[CallContext]:
    # Nothing answers: no vectors, words alone
    return service_call(db, WRITER, embedder=unreachable_embedder(), feature_settings={GraphSettings: SETTINGS})


async def test_reflections_name_their_target_and_queue_their_vector(db: Database) -> None:
    async with call(db) as ctx:
        await service.create_entities(ctx, CreateEntitiesIn(project="lab", entities=[EntityIn(name="Ada")]))
        about = await add_reflection(
            ctx, AddReflectionIn(project="lab", target_type="entity", target_name="Ada", content="Ada came first")
        )
        assert about.target_id is not None and about.target_name == "Ada" and about.author == "sofia"
        overall = await add_reflection(ctx, AddReflectionIn(project="lab", content="the graph is small", mood="calm"))
        assert overall.target_type == "global" and overall.target_id is None and overall.target_name is None
        queued = QueuedVectors.find(ctx)
        assert (
            queued is not None and len(queued.ids) >= 2
        )  # the entity's vector and both reflections' are queued for after the commit
        with pytest.raises(NotFound, match="Entity with name Babbage not found"):
            await add_reflection(
                ctx, AddReflectionIn(project="lab", target_type="entity", target_name="Babbage", content="x")
            )
        with pytest.raises(InvalidInput, match="target_name is required"):
            await add_reflection(ctx, AddReflectionIn(project="lab", target_type="entity", content="x"))


async def test_search_ranks_on_words_without_vectors_and_filters(db: Database) -> None:
    async with call(db) as ctx:
        await add_reflection(ctx, AddReflectionIn(project="notes", content="rivers carve stone", author="ana"))
        await add_reflection(ctx, AddReflectionIn(project="notes", content="stone walls", target_type="session"))
        await add_reflection(ctx, AddReflectionIn(project="notes", content="nothing related here"))
    async with call(db) as ctx:
        found = await search_reflections(ctx, SearchReflectionsIn(project="notes", query="river stone"))
        contents = [h.content for h in found.results]
        assert "nothing related here" not in contents and set(contents) == {"rivers carve stone", "stone walls"}
        for hit in found.results:
            assert hit.cosine_sim == 0.0 and hit.score == pytest.approx(SETTINGS.text_weight * hit.text_score, abs=1e-6)
        assert [h.score for h in found.results] == sorted((h.score for h in found.results), reverse=True)
        by_ana = await search_reflections(ctx, SearchReflectionsIn(project="notes", query="stone", author="ana"))
        assert [h.content for h in by_ana.results] == ["rivers carve stone"]
        sessions = await search_reflections(
            ctx, SearchReflectionsIn(project="notes", query="stone", target_type="session")
        )
        assert [h.content for h in sessions.results] == ["stone walls"]
        one = await search_reflections(ctx, SearchReflectionsIn(project="notes", query="stone", limit=1))
        assert len(one.results) == 1
        nowhere = await search_reflections(ctx, SearchReflectionsIn(project="no-such-project", query="stone"))
        assert nowhere.results == []
