"""The server's entry: assembles the process's parts from the settings and the enabled features, then
serves them over HTTP (`create_app`: MCP at /mcp, REST at /api/v1, the console, docs and probes; see
`app.core.http`) or over stdio (`run_stdio`)."""

from __future__ import annotations

import logging
import sys
from typing import Any

from fastapi import FastAPI
from uvicorn.config import STARTUP_FAILURE

from app.core import migrations
from app.core.assembly import Assembly, Bootstrap, running
from app.core.auth import parse_static_keys
from app.core.config import Settings, get_settings
from app.core.context import AppState
from app.core.db import Database
from app.core.embeddings.queue import EmbeddingQueue
from app.core.feature import build_registry, build_settings
from app.core.fleet_limits import FleetRateLimiter, FleetSlots
from app.core.http.callers import Callers, keys_exist, starts_open
from app.core.http.mcp_adapter import build_mcp
from app.core.http.server import build_http_app
from app.core.logs import configure_logging
from app.core.operations import ops as core_ops
from app.core.pgembedded import EmbeddedPostgres, start_embedded
from app.core.ratelimit import JobSlots, RateLimiter, StreamSlots
from app.core.registry import OperationSet
from app.core.replicas import Replicas
from app.core.runtime import make_embedder, run_blocking
from app.core.stdio import serve_stdio
from app.core.toolsets import Catalog
from app.features import enabled

log = logging.getLogger("cairn")


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
    if settings.database_pooler == "transaction" and not settings.database_direct_url:
        log.warning(
            "CAIRN_DATABASE_POOLER=transaction without CAIRN_DATABASE_DIRECT_URL: migrations go through the pooler"
        )
    if settings.migrate_on_start:
        migrations.upgrade(settings.direct_url(url), features)
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
        replicas=Replicas.build(db, settings),
    )
    _limits(state, local)
    queue = state.queue = EmbeddingQueue(
        db, state.embedder, [t for f in features for t in f.embedding_targets], settings
    )
    callers = Callers.build(db, settings, open_mode=boot.open_mode, local=local)
    catalog = state.catalog = Catalog(registry, settings.mcp_toolsets)
    mcp = build_mcp(state, callers, catalog)
    return Assembly(settings, boot, features, state, queue, callers, catalog, mcp)


def _limits(state: AppState, local: bool) -> None:
    """The per-key limits: held across every process on the database for a server, in this process's
    memory for a local (stdio) session, which is one user's only process."""
    settings, db = state.settings, state.db
    rate, burst = settings.rate_limit_per_second, settings.rate_limit_burst
    jobs = JobSlots(settings.max_long_jobs_per_key)
    if local:
        state.limiter, state.jobs = RateLimiter(rate, burst), jobs
        return
    state.limiter = FleetRateLimiter(rate, burst, db)
    state.jobs = FleetSlots(jobs, db, "job")
    state.streams = FleetSlots(StreamSlots(settings.max_sse_streams_per_key), db, "stream")


def run_stdio(settings: Settings, toolsets: str | None = None) -> int:
    """Serve MCP over stdin/stdout (`cairn stdio`) on the embedded PostgreSQL unless
    `CAIRN_DATABASE_URL` is set; see `app.core.stdio`."""
    return serve_stdio(lambda: assemble(settings, local=True), toolsets)


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
        database_url=settings.direct_url(asm.boot.url),
        running=lambda: running(asm, host=settings.host, port=settings.port),
    )
