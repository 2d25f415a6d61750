"""The probes: liveness (`/healthz`), readiness (`/readyz`), Prometheus metrics (`/metrics`) and the
`/.well-known/` answers MCP clients look for before they send a bearer key. None is in the OpenAPI
document; the HTTP front skips its browser checks for the two health probes."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from app.core import metrics, migrations
from app.core.context import AppState
from app.core.errors import NotFound
from app.core.http.callers import Callers
from app.core.http.rest_adapter import authenticate


def probes_router(state: AppState, callers: Callers, database_url: str) -> APIRouter:
    """The probes of this server (`database_url`: where readiness checks the migrations)."""
    router = APIRouter(include_in_schema=False)

    @router.get("/healthz")
    async def healthz() -> dict[str, str | int]:
        return {"status": "ok", "pid": os.getpid()}  # the pid tells `--workers` processes apart

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        checks = await readiness(state, database_url)
        ready = bool(checks["database"] and checks["migrations"] and checks["embedder"])
        return JSONResponse(
            {"status": "ready" if ready else "not ready", "checks": checks}, status_code=200 if ready else 503
        )

    @router.get("/metrics")
    async def prometheus(request: Request) -> Response:
        await authenticate(request)  # any valid key when keys exist; open mode serves loopback only
        if state.queue is not None:
            with contextlib.suppress(Exception):
                await state.queue.stats()  # refreshes the queue gauges
        body, ctype = metrics.render(state.db.pool_status())
        return PlainTextResponse(body, media_type=ctype)

    if callers.metadata_url:

        @router.get("/.well-known/oauth-protected-resource{suffix:path}")
        async def protected_resource(suffix: str) -> dict[str, Any]:
            """RFC 9728 metadata naming only what exists: bearer API keys in the header, Cairn's three
            scopes, and no authorization server (keys come from `cairn keys create`, not OAuth)."""
            return {
                "resource": state.settings.resource_url(),
                "resource_name": "Cairn",
                "bearer_methods_supported": ["header"],
                "scopes_supported": ["read", "write", "admin"],
            }

    # Clients probe these before falling back to a bearer token; answer in JSON, not the MCP app's text 404.
    for probe in ("oauth-authorization-server", "openid-configuration"):

        @router.get(f"/.well-known/{probe}{{suffix:path}}")
        async def no_authorization_server(suffix: str) -> Response:
            raise NotFound(
                "This server has no OAuth authorization server; send an API key as a bearer token",
                suggestions=["Create a key with `cairn keys create` and send `Authorization: Bearer <key>`"],
            )

    return router


async def readiness(state: AppState, database_url: str) -> dict[str, Any]:
    """What `/readyz` checks: the database, the migrations, the embedder and the embedding queue's
    depth (None when it cannot be read; it does not decide readiness)."""
    checks: dict[str, Any] = {"database": await state.db.ping()}
    try:
        checks["migrations"] = await migrations.at_head(database_url, state.features)
    except Exception:
        checks["migrations"] = False
    try:
        await state.embedder.check()
        checks["embedder"] = True
    except Exception as exc:
        checks["embedder"] = False
        checks["embedder_error"] = str(exc)[:200]
    try:
        if state.queue is None:
            raise LookupError("no embedding queue")
        queued = await state.queue.stats()
        checks["embedding_queue"] = {"depth": queued.depth, "oldest_seconds": queued.oldest_seconds}
    except Exception:
        checks["embedding_queue"] = None
    return checks
