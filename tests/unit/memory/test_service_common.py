"""app/memory/service_common.py with a real call context on a database of its own: what a bound key
may see, the dedupe and summary keys, projects and collections resolved (and made for writes), and a
search that goes on without vectors when the model is unreachable."""

from __future__ import annotations

import hashlib
import uuid
from contextlib import AbstractAsyncContextManager

import pytest

from app.core.context import CallContext, Principal
from app.core.db import Database
from app.core.embeddings.calls import query_vector
from app.core.embeddings.provider import EmbeddingProvider
from app.core.embeddings.providers import build_embedder
from app.core.errors import Forbidden, NotFound
from app.memory import service_common
from app.memory.config import MemorySettings
from tests.support.calls import service_call, unreachable_embedder
from tests.support.databases import database_fixture

UNBOUND = Principal(key_id="k1", name="unbound", scopes=frozenset({"write"}))
BOUND = Principal(key_id="k2", name="bound", scopes=frozenset({"write"}), project="alpha")


db = database_fixture(["memory"])


def call(
    db: Database, principal: Principal = UNBOUND, embedder: EmbeddingProvider | None = None
) -> AbstractAsyncContextManager[CallContext]:
    notes = MemorySettings(memory_default_collection="notes")
    return service_call(
        db, principal, embedder=embedder or unreachable_embedder(), feature_settings={MemorySettings: notes}
    )


def test_the_dedupe_and_summary_keys_are_stable_hashes() -> None:
    assert service_common.content_hash("é") == hashlib.sha256("é".encode()).hexdigest()
    assert service_common.key_of("p", {"b": 1, "a": 2}) == service_common.key_of("p", {"a": 2, "b": 1})
    assert service_common.key_of("p", 1) != service_common.key_of("p", "1")
    assert service_common.key_of(uuid.UUID(int=1)) == service_common.key_of(str(uuid.UUID(int=1)))


async def test_a_bound_key_sees_its_project_only(db: Database) -> None:
    async with call(db, BOUND) as ctx:
        assert service_common.visible(ctx, {"project": "alpha"}) and not service_common.visible(ctx, {"project": "b"})
    async with call(db) as ctx:
        assert service_common.visible(ctx, {"project": "anything"})


async def test_projects_are_made_for_writes_and_only_read_otherwise(db: Database) -> None:
    async with call(db) as ctx:
        assert await service_common.project_for_read(ctx, "fresh") == ("fresh", None)
        assert await service_common.project_filter(ctx, "fresh") == (False, None)
        assert await service_common.project_filter(ctx, None) == (True, None)  # no project: every project
        made = await service_common.project_for_write(ctx, "fresh")
        again = await service_common.project_for_write(ctx, "fresh")
        assert made.id == again.id and made.name == "fresh"
        name, row = await service_common.project_for_read(ctx, "fresh")
        assert name == "fresh" and row is not None and row.id == made.id
        assert await service_common.project_filter(ctx, "fresh") == (True, made.id)
        assert (await service_common.project_for_write(ctx, None)).name == "default"
    async with call(db, BOUND) as ctx:
        exists, pid = await service_common.project_filter(ctx, None)  # a bound key: its own project
        assert (exists, pid) == (False, None)
        with pytest.raises(Forbidden):
            await service_common.project_for_write(ctx, "fresh")


async def test_collections_default_and_are_made_for_writes(db: Database) -> None:
    local = build_embedder("local")
    async with call(db, embedder=local) as ctx:
        assert await service_common.collection_for_read(ctx, None) is None  # the default, not made yet
        with pytest.raises(NotFound, match="No collection named 'papers'"):
            await service_common.collection_for_read(ctx, "papers")
        made = await service_common.collection_for_write(ctx, None)
        assert made.name == "notes" and made.vector_size == local.dimension and made.model == local.model
        assert (await service_common.collection_for_write(ctx, None)).id == made.id
        found = await service_common.collection_for_read(ctx, None)
        assert found is not None and found.id == made.id


async def test_a_search_goes_on_without_vectors_when_the_model_is_unreachable(db: Database) -> None:
    async with call(db) as ctx:
        assert await query_vector(ctx, "anything", "memory search") is None
