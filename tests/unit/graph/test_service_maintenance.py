"""app/graph/service_maintenance.py with a real call context and the local model, on a database of its
own: near-duplicate observations of one entity found and flagged (not those of different entities),
then merged by a consolidation that a dry run only describes; no model, no scan."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest

from app.core.context import CallContext, Principal
from app.core.db import Database
from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.embeddings.provider import EmbeddingProvider
from app.core.embeddings.providers import build_embedder
from app.core.errors import NotFound, Unavailable
from app.graph import service
from app.graph.schemas import ConsolidateIn, CreateEntitiesIn, EntityIn, FindDuplicatesIn, ProjectIn
from app.graph.service_maintenance import consolidate, find_duplicate_observations
from app.graph.service_stats import graph_stats
from tests.support.calls import local_model_fixture, service_call
from tests.support.databases import database_fixture
from tests.support.server import free_port

FIRST = "Ada wrote the first computer program"
ADMIN = Principal(key_id="k1", name="admin", scopes=frozenset({"admin"}))


db = database_fixture(["graph"])


local = local_model_fixture()


def call(db: Database, embedder: EmbeddingProvider) -> AbstractAsyncContextManager[CallContext]:
    return service_call(db, ADMIN, embedder=embedder)


async def test_duplicates_are_flagged_then_merged(db: Database, local: LocalOnnxEmbedder) -> None:
    entities = [
        EntityIn(
            name="Ada",
            observations=[
                "Ada wrote the first computer program",
                "Ada wrote the first computer program.",
                "Ada liked horses",
            ],
        ),
        EntityIn(name="Grace", observations=[FIRST]),  # another entity's: kept
    ]
    async with call(db, local) as ctx:
        await service.create_entities(ctx, CreateEntitiesIn(project="lab", entities=entities))
    async with call(db, local) as ctx:
        found = await find_duplicate_observations(ctx, FindDuplicatesIn(project="lab", threshold=0.95))
    assert found.scanned_observations == 4 and found.flagged == 1 and not found.truncated
    [pair] = found.pairs
    assert pair.entity_name == "Ada" and pair.similarity >= 0.95
    assert (pair.kept.content, pair.duplicate.content) == (FIRST, f"{FIRST}.")
    async with call(db, local) as ctx:
        planned = await consolidate(ctx, ConsolidateIn(project="lab"))  # a dry run by default
    assert planned.dry_run and planned.merged_count == 1 and planned.reembedded_entities == 0
    async with call(db, local) as ctx:
        assert (await graph_stats(ctx, ProjectIn(project="lab"))).superseded_observations == 0  # nothing changed
        done = await consolidate(ctx, ConsolidateIn(project="lab", dry_run=False))
    assert done.merged_count == 1 and done.reembedded_entities == 1
    assert [(m.entity_name, m.kept_id, m.removed_id) for m in done.merged] == [("Ada", pair.kept.id, pair.duplicate.id)]
    async with call(db, local) as ctx:
        assert (await graph_stats(ctx, ProjectIn(project="lab"))).superseded_observations == 1
        again = await find_duplicate_observations(ctx, FindDuplicatesIn(project="lab", threshold=0.95))
    assert again.pairs == [] and again.scanned_observations == 3


async def test_an_unknown_entity_or_project_and_a_missing_model(db: Database, local: LocalOnnxEmbedder) -> None:
    async with call(db, local) as ctx:
        with pytest.raises(NotFound):
            await find_duplicate_observations(ctx, FindDuplicatesIn(project="lab", entity_name="Nobody"))
        nothing = await find_duplicate_observations(ctx, FindDuplicatesIn(project="nowhere"))
        assert nothing.scanned_observations == 0 and nothing.pairs == []
        assert (await consolidate(ctx, ConsolidateIn(project="nowhere"))).merged_count == 0
    url = f"http://127.0.0.1:{free_port()}/v1"
    gone = build_embedder("openai", model="text-embedding-3-small", dimension=384, base_url=url, timeout=2)
    async with call(db, gone) as ctx:
        entity = EntityIn(name="Twice", observations=["the same words", "the same words again"])
        await service.create_entities(ctx, CreateEntitiesIn(project="nomodel", entities=[entity]))
    async with call(db, gone) as ctx:
        with pytest.raises(Unavailable, match="embedding model is unavailable"):
            await find_duplicate_observations(ctx, FindDuplicatesIn(project="nomodel"))
