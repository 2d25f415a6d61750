"""The FastAPI application: MCP at /mcp, REST at /api/v1, docs, health, readiness and metrics."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import FastAPI
from uvicorn.config import STARTUP_FAILURE

from app.core import migrations
from app.core.auth import parse_static_keys
from app.core.config import Settings, get_settings
from app.core.context import AppState
from app.core.db import Database
from app.core.embedding_queue import EmbeddingQueue
from app.core.errors import CairnError
from app.core.feature import Feature, build_registry, build_settings
from app.core.http.callers import Callers, keys_exist, starts_open
from app.core.http.mcp_adapter import CairnMCPServer, build_mcp
from app.core.http.server import build_http_app
from app.core.logs import configure_logging
from app.core.operations import ops as core_ops
from app.core.pgembedded import EmbeddedPostgres, start_embedded
from app.core.ratelimit import JobSlots, RateLimiter
from app.core.registry import OperationSet
from app.core.repository import EmbeddingModelRepository
from app.core.runtime import make_embedder, run_blocking
from app.core.toolsets import Catalog, Selection
from app.core.toolsets import parse as parse_toolsets
from app.features import enabled

log = logging.getLogger("cairn")
T = TypeVar("T")


@dataclass
class Bootstrap:
    """What start-up prepared before the app is built."""

    url: str
    pg: EmbeddedPostgres | None
    open_mode: bool


def bootstrap(settings: Settings, features: list[str], *, local: bool = False) -> Bootstrap:
    """Start the embedded database if needed, migrate the enabled features, decide the auth mode
    (`local`: a stdio session needs no key)."""
    pg = None
    url = settings.database_url
    if not url:
        pg = start_embedded(settings.data_dir)
        url = pg.url()
    try:
        return _prepare(settings, features, url, pg, local)
    except BaseException:
        if pg is not None:  # a refused start leaves no database running behind it
            pg.stop()
        raise


def _prepare(settings: Settings, features: list[str], url: str, pg: EmbeddedPostgres | None, local: bool) -> Bootstrap:
    if settings.migrate_on_start:
        migrations.upgrade(url, features)
    if local:
        return Bootstrap(url=url, pg=pg, open_mode=True)

    async def any_keys() -> bool:
        db = Database(url, settings)
        try:
            return await keys_exist(db, parse_static_keys(settings.api_keys))
        finally:
            await db.dispose()

    return Bootstrap(url=url, pg=pg, open_mode=starts_open(settings, run_blocking(any_keys)))


def create_worker_app() -> FastAPI:
    """The app of one `cairn serve --workers N` process (uvicorn's factory; settings from the
    environment the parent prepared). A worker that cannot build it exits with uvicorn's start-up
    failure code, so the parent stops instead of restarting workers that would fail the same way."""
    try:
        return create_app()
    except Exception:
        log.exception("this worker could not start")
        sys.exit(STARTUP_FAILURE)


@dataclass
class Assembly:
    """The process's parts, built once per server (HTTP) or stdio session: everything but a transport."""

    settings: Settings
    boot: Bootstrap
    features: list[Feature]
    state: AppState
    queue: EmbeddingQueue
    callers: Callers
    catalog: Catalog
    mcp: CairnMCPServer

    @property
    def names(self) -> list[str]:
        """The enabled features' names."""
        return [f.name for f in self.features]


def assemble(settings: Settings, extra: list[OperationSet] | None = None, *, local: bool = False) -> Assembly:
    """Start the database (embedded if none is configured), migrate, and build the state, the embedding
    queue and the MCP server (blocking). `local`: a stdio session of the user who started it, which
    needs no key (the process could read the database's credentials anyway)."""
    configure_logging(settings.log_level, settings.log_format)
    features = enabled(settings.features)
    names = [f.name for f in features]
    boot = bootstrap(settings, names, local=local)
    db = Database(boot.url, settings)
    registry = build_registry(core_ops, features)
    for opset in extra or []:
        registry.add(opset)
    feature_settings = build_settings(features)
    public_settings: dict[str, Any] = {}
    for feature in features:
        if feature.public_settings is not None and feature.settings is not None:
            public_settings.update(feature.public_settings(feature_settings[feature.settings]))
    state = AppState(
        settings=settings,
        db=db,
        embedder=make_embedder(settings),
        registry=registry,
        features=names,
        feature_settings=feature_settings,
        public_settings=public_settings,
        extras={"embedded_pg": boot.pg},
        limiter=RateLimiter(settings.rate_limit_per_second, settings.rate_limit_burst),
        jobs=JobSlots(settings.max_long_jobs_per_key),
    )
    queue = state.queue = EmbeddingQueue(
        db, state.embedder, [t for f in features for t in f.embedding_targets], settings
    )
    callers = Callers.build(db, settings, open_mode=boot.open_mode, local=local)
    catalog = state.catalog = Catalog(registry, settings.mcp_toolsets)
    mcp = build_mcp(state, callers, catalog)
    return Assembly(settings, boot, features, state, queue, callers, catalog, mcp)


@asynccontextmanager
async def running(asm: Assembly, **banner: Any) -> AsyncIterator[None]:
    """Start the embedder, the features and the queue workers for the block; stop them, the database
    and the embedded PostgreSQL after it."""
    state, db = asm.state, asm.state.db
    try:
        await state.embedder.start()
        async with db.transaction() as session:
            await EmbeddingModelRepository(session).register(
                state.embedder.model, state.embedder.provider, state.embedder.dimension
            )
        state.extras["migrations_at_head"] = await migrations.at_head(asm.boot.url, asm.names)
        for feature in asm.features:
            if feature.startup is not None:
                await feature.startup(state)
        asm.queue.start()
        where = ""
        if "host" in banner and "port" in banner:
            base = asm.settings.public_url or f"http://{banner['host']}:{banner['port']}"
            where = f" at {base}: MCP {base}/mcp, REST {base}/api/v1, docs {base}/docs"
        log.info(f"cairn ready{where}", extra={**banner, "features": asm.names, "open_mode": asm.boot.open_mode})
        yield
    finally:
        await asm.queue.stop()
        for feature in reversed(asm.features):
            if feature.shutdown is not None:
                await feature.shutdown(state)
        await state.embedder.close()
        await db.dispose()
        if asm.boot.pg is not None:
            asm.boot.pg.stop()
        log.info("cairn stopped")


def run_stdio(settings: Settings, toolsets: str | None = None) -> int:
    """Serve MCP over stdin/stdout for a desktop client that starts Cairn itself (one session per
    process): the same registry, executor and toolsets as `/mcp`, on the embedded PostgreSQL unless
    `CAIRN_DATABASE_URL` is set. No key is needed: the client runs as the user who owns the data.

    Until the protocol starts, file descriptor 1 points at stderr, so nothing the start-up prints (or
    the PostgreSQL it starts, which inherits it) can corrupt the protocol stream."""
    import anyio

    protocol = os.dup(1)
    os.dup2(2, 1)

    def restore_stdout() -> None:
        os.dup2(protocol, 1)
        os.close(protocol)

    try:
        asm = assemble(settings, local=True)
    except BaseException:
        restore_stdout()
        raise
    selection = parse_toolsets(toolsets) if toolsets else Selection()
    try:
        asm.catalog.check(selection)
    except CairnError as err:
        if asm.boot.pg is not None:
            asm.boot.pg.stop()
        restore_stdout()
        raise err from None
    asm.mcp.fixed = selection

    async def main() -> None:
        async with running(asm, transport="stdio", toolsets=selection.path):
            restore_stdout()  # the SDK claims fd 1 for the protocol and diverts prints to stderr
            await asm.mcp.run_stdio_async()

    anyio.run(main)
    return 0


def create_app(settings: Settings | None = None, extra: list[OperationSet] | None = None) -> FastAPI:
    """Build the whole application (blocking: starts the database and migrates first).

    `extra` adds operation sets beyond the enabled features (the test suite's instrumentation)."""
    settings = settings or get_settings()
    asm = assemble(settings, extra)
    return build_http_app(
        asm.state,
        asm.callers,
        asm.mcp,
        asm.catalog,
        asm.features,
        database_url=asm.boot.url,
        running=lambda: running(asm, host=settings.host, port=settings.port),
    )
