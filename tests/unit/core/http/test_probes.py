"""app/core/http/probes.py: what readiness checks, and which well-known routes a server serves."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.routing import APIRoute

from app.core import migrations
from app.core.http.callers import Callers
from app.core.http.probes import probes_router, readiness


class _Db:
    def __init__(self, up: bool) -> None:
        self.up = up

    async def ping(self) -> bool:
        return self.up


class _Embedder:
    def __init__(self, error: str | None) -> None:
        self.error = error

    async def check(self) -> None:
        if self.error:
            raise RuntimeError(self.error)


class _Queue:
    async def stats(self) -> Any:
        return SimpleNamespace(depth=3, oldest_seconds=1.5)


def _state(up: bool = True, error: str | None = None, queue: Any = None) -> Any:
    return SimpleNamespace(db=_Db(up), embedder=_Embedder(error), queue=queue, features=["memory"], settings=None)


async def test_readiness_checks_the_database_migrations_embedder_and_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    async def at_head(url: str, features: list[str]) -> bool:
        return features == ["memory"]

    monkeypatch.setattr(migrations, "at_head", at_head)
    ready = await readiness(_state(queue=_Queue()), "postgresql://x")
    assert ready == {
        "database": True,
        "migrations": True,
        "embedder": True,
        "embedding_queue": {"depth": 3, "oldest_seconds": 1.5},
    }
    down = await readiness(_state(up=False, error="model gone " * 40), "postgresql://x")
    assert down["database"] is False and down["embedder"] is False and down["embedding_queue"] is None
    assert len(down["embedder_error"]) == 200


def test_the_protected_resource_metadata_is_served_only_by_a_server_with_keys() -> None:
    def paths(callers: Callers) -> set[str]:
        return {r.path for r in probes_router(_state(), callers, "x").routes if isinstance(r, APIRoute)}

    keyed = paths(Callers(store=object(), metadata_url="http://h/.well-known/x"))  # type: ignore[arg-type]
    assert "/.well-known/oauth-protected-resource{suffix:path}" in keyed
    open_server = paths(Callers())
    assert "/.well-known/oauth-protected-resource{suffix:path}" not in open_server
    assert {"/healthz", "/readyz", "/metrics", "/.well-known/openid-configuration{suffix:path}"} <= open_server
