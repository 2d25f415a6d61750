"""app/core/service.py with a real call context on a migrated database of its own: projects created
once and listed per caller, keys stored by hash and shown once, bound keys kept to their project, the
embedding probe's summary, and a wait for vectors without a queue."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest

from app.core import service
from app.core.config import Settings
from app.core.context import OPEN_PRINCIPAL, CallContext, Principal
from app.core.db import Database
from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.embeddings.provider import EmbeddingProvider
from app.core.errors import Forbidden, NotFound, Unauthenticated, Unavailable
from app.core.models import ApiKey
from app.core.schemas import CreateKeyIn
from tests.support.calls import service_call
from tests.support.databases import database_fixture

ADMIN = Principal(key_id="a", name="admin", scopes=frozenset({"admin"}))
BOUND = Principal(key_id="b", name="bound", scopes=frozenset({"admin"}), project="team")


db = database_fixture([])


@pytest.fixture(scope="module")
def model() -> LocalOnnxEmbedder:
    return LocalOnnxEmbedder()


def call(
    db: Database, embedder: EmbeddingProvider, principal: Principal = ADMIN
) -> AbstractAsyncContextManager[CallContext]:
    return service_call(db, principal, embedder=embedder, settings=Settings(embedding_max_length=16))


async def test_projects_are_created_once_and_listed_per_caller(db: Database, model: LocalOnnxEmbedder) -> None:
    async with call(db, model) as ctx:
        made, created = await service.create_project(ctx, "team", "the team's")
        again, created_again = await service.create_project(ctx, "team", "ignored")
        assert created and not created_again and again.id == made.id and again.description == "the team's"
        await service.create_project(ctx, "solo", "")
        listed, total = await service.list_projects(ctx, limit=1, offset=0)
        assert total == 2 and len(listed) == 1
    async with call(db, model, BOUND) as ctx:
        mine, total = await service.list_projects(ctx, limit=10, offset=0)
        assert [p.name for p in mine] == ["team"] and total == 1
        with pytest.raises(Forbidden):
            await service.create_project(ctx, "other", "")


async def test_keys_are_stored_by_hash_shown_once_and_kept_to_their_project(
    db: Database, model: LocalOnnxEmbedder
) -> None:
    async with call(db, model) as ctx:
        made = await service.create_key(ctx, CreateKeyIn(name="ci", scopes=["admin", "read"], toolsets=["memory"]))
        assert made.key.scopes == ["read", "admin"] and made.key.prefix == made.token[:12]
        assert made.key.project is None and made.key.toolsets == ["memory"]
        stored = await ctx.session.get(ApiKey, made.key.id)
        assert stored is not None and stored.key_hash and made.token not in str(vars(stored))  # its hash alone
    async with call(db, model, BOUND) as ctx:
        bound = await service.create_key(ctx, CreateKeyIn(name="member", scopes=["read"]))
        assert bound.key.project == "team"  # a bound caller's keys are bound to its project
        with pytest.raises(Forbidden):
            await service.create_key(ctx, CreateKeyIn(scopes=["read"], project="solo"))
        assert [k.name for k in await service.list_keys(ctx, include_revoked=False)] == ["member"]
        with pytest.raises(NotFound):
            await service.revoke_key(ctx, made.key.id)  # not its project's key
    async with call(db, model) as ctx:
        assert {k.name for k in await service.list_keys(ctx, include_revoked=False)} == {"ci", "member"}
        assert await service.revoke_key(ctx, made.key.prefix) == 1
        with pytest.raises(NotFound, match="No active key"):
            await service.revoke_key(ctx, made.key.prefix)  # already revoked
        assert {k.name for k in await service.list_keys(ctx, include_revoked=False)} == {"member"}
        everything = await service.list_keys(ctx, include_revoked=True)
        assert {k.name: k.revoked_at is not None for k in everything} == {"ci": True, "member": False}


async def test_the_embedding_probe_summarises_one_vector(db: Database, model: LocalOnnxEmbedder) -> None:
    async with call(db, model) as ctx:
        short = await service.embed_summary(ctx, "a short text")
        long = await service.embed_summary(ctx, "many words " * 40)
    assert short["dimension"] == model.dimension and short["model"] == model.model
    assert short["norm"] == pytest.approx(1.0, abs=1e-5) and len(short["head"]) == 8  # type: ignore[arg-type]
    assert short["truncated"] is False and long["truncated"] is True  # past embedding_max_length (16)


async def test_waiting_for_vectors_needs_a_queue(db: Database, model: LocalOnnxEmbedder) -> None:
    async with call(db, model) as ctx:
        with pytest.raises(Unavailable, match="no embedding queue"):
            await service.wait_for_embeddings(ctx, 1.0)


async def test_an_open_servers_anonymous_caller_creates_no_key_once_one_exists(
    db: Database, model: LocalOnnxEmbedder
) -> None:
    async with call(db, model) as ctx:
        await service.create_key(ctx, CreateKeyIn(scopes=["read"], name="first"))
    with pytest.raises(Unauthenticated):
        async with call(db, model, OPEN_PRINCIPAL) as ctx:  # over HTTP: the caller of an open server
            await service.create_key(ctx, CreateKeyIn(scopes=["admin"], name="late"))
    async with call(db, model, OPEN_PRINCIPAL) as ctx:
        ctx.transport = "stdio"  # the local user of a stdio session may, as the CLI may
        made = await service.create_key(ctx, CreateKeyIn(scopes=["admin"], name="local"))
    assert made.key.name == "local"
