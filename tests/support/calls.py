"""The context of a service call for the unit tests: an `AppState` on a test database and one
transaction, as the executor would give a service (without the executor's retries and limits)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import pytest
from pydantic_settings import BaseSettings

from app.core.config import Settings
from app.core.context import AppState, CallContext, Principal
from app.core.db import Database
from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.embeddings.provider import EmbeddingProvider
from app.core.embeddings.providers import build_embedder
from app.core.registry import Registry
from tests.support.server import free_port


def unreachable_embedder() -> EmbeddingProvider:
    """An OpenAI-compatible provider nothing answers for (a closed port on this host): vectors stay
    queued and searches run on words alone."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    return build_embedder("openai", model="text-embedding-3-small", dimension=384, base_url=url, timeout=2)


def local_model_fixture() -> Callable[..., Any]:
    """A module-scoped pytest fixture yielding the local model, checked (loaded) and closed after the
    module; assign it to the fixture's name in the test module: `local = local_model_fixture()`."""

    @pytest.fixture(scope="module")
    async def fixture() -> AsyncIterator[LocalOnnxEmbedder]:
        model = LocalOnnxEmbedder()
        await model.check()
        try:
            yield model
        finally:
            await model.close()

    return fixture


@asynccontextmanager
async def service_call(
    db: Database,
    principal: Principal,
    *,
    embedder: EmbeddingProvider | None = None,
    settings: Settings | None = None,
    feature_settings: Mapping[type[BaseSettings], BaseSettings] | None = None,
    **context: Any,
) -> AsyncIterator[CallContext]:
    """A `CallContext` for `principal` in one transaction of `db` (committed when the block succeeds);
    the embedder is the local model unless one is given; `context`: CallContext's other fields."""
    state = AppState(
        settings or Settings(),
        db,
        embedder or LocalOnnxEmbedder(),
        Registry(),
        feature_settings=dict(feature_settings or {}),
    )
    async with db.transaction() as session:
        yield CallContext(session=session, principal=principal, app=state, request_id="t", transport="test", **context)
