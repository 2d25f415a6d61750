"""The FastAPI application: MCP at /mcp, REST at /api/v1, docs, health, readiness and metrics."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi_offline import FastAPIOffline
from uvicorn.config import STARTUP_FAILURE

from app import __version__
from app.core import metrics, migrations, ui, ui_admin
from app.core.auth import (
    KeyStore,
    OpenModeGuard,
    bearer_principal,
    hash_key,
    open_mode_caller,
    parse_static_keys,
)
from app.core.config import Settings, get_settings
from app.core.context import AppState
from app.core.db import Database
from app.core.embeddings.queue import EmbeddingQueue
from app.core.errors import CairnError, NotFound
from app.core.feature import Feature, build_registry, build_settings
from app.core.http_front import HttpFront, error_response, multipart_paths, sdk_transport_security, send_error
from app.core.logs import configure_logging
from app.core.mcp_adapter import build_mcp
from app.core.operations import ops as core_ops
from app.core.pgembedded import EmbeddedPostgres, start_embedded
from app.core.ratelimit import FailureLimiter, JobSlots, RateLimiter, StreamSlots
from app.core.registry import OperationSet
from app.core.repository import EmbeddingModelRepository
from app.core.rest_adapter import authenticate, build_router, install_openapi
from app.core.runtime import make_embedder, run_blocking
from app.core.toolsets import MCP_PATH, Catalog, Selection, ToolsetRouter
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
    static = parse_static_keys(settings.api_keys)

    async def any_keys() -> bool:
        db = Database(url, settings)
        try:
            return await KeyStore(db, static).has_any_key()
        finally:
            await db.dispose()

    if local:
        return Bootstrap(url=url, pg=pg, open_mode=True)
    has_keys = run_blocking(any_keys)
    open_mode = False
    if not has_keys:
        if not settings.is_loopback():
            raise RuntimeError(
                f"Refusing to serve on {settings.host} without API keys: create one with "
                "`cairn keys create --scopes read,write` or set CAIRN_API_KEYS"
            )
        open_mode = True
        log.warning("no API keys configured: serving WITHOUT authentication (loopback only)")
    return Bootstrap(url=url, pg=pg, open_mode=open_mode)


class OpenModeLock:
    """In front of `/mcp` on a server that started without keys: once a key exists (`OpenModeGuard`),
    a request without a valid one is refused (4010), and a valid one's principal is handed to the
    MCP handlers (the SDK's own auth is not configured on such a server)."""

    def __init__(self, app: Any, guard: OpenModeGuard) -> None:
        self.app, self.guard = app, guard

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not await self.guard.locked():
            await self.app(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope.get("headers") or () if k == b"authorization"), "")
        try:
            principal = await bearer_principal(self.guard.store, header, None)
        except CairnError as err:
            await send_error(send, err)
            return
        token = open_mode_caller.set(principal)
        try:
            await self.app(scope, receive, send)
        finally:
            open_mode_caller.reset(token)


class McpFastPath:
    """Sends `/mcp` and `/mcp/...` requests straight to the MCP app (the `ToolsetRouter`). The app is
    also mounted at `/` for the SDK's other paths, but a mount is only tried after every REST route,
    and trying them all was a measurable share of a trivial MCP call.

    Before the SDK sees a request it refuses (4290) a client locked out of key lookups by failed
    authentications (the SDK would turn the limit's error into a 500), and it caps the open
    `GET /mcp` event streams per key (`CAIRN_MAX_SSE_STREAMS_PER_KEY`)."""

    def __init__(self, app: Any, mcp: Any, store: KeyStore | None, streams: StreamSlots) -> None:
        self.app = app
        self.mcp = mcp
        self.store = store
        self.streams = streams

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == MCP_PATH or path.startswith(MCP_PATH + "/")):
            await self.app(scope, receive, send)
            return
        store = self.store
        client = scope.get("client")
        if store is not None and store.failures is not None and client:
            if store.failures.retry_after(client[0]) is not None:
                err = store.refusal(_bearer(scope))
                if err is not None:
                    await send_error(send, err)
                    return
        if scope["method"] != "GET":
            await self.mcp(scope, receive, send)
            return
        token = _bearer(scope)
        key = hash_key(token)[:16] if token else "anonymous"
        try:
            self.streams.acquire(key)
        except CairnError as err:
            await send_error(send, err)
            return
        try:
            await self.mcp(scope, receive, send)
        finally:
            self.streams.release(key)


def _bearer(scope: Any) -> str:
    """The token of the request's `Authorization: Bearer` header ("" without one)."""
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            text = value.decode("latin-1")
            return text[7:].strip() if text[:7].lower() == "bearer " else ""
    return ""


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
    store: KeyStore | None
    catalog: Catalog
    mcp: Any
    failures: FailureLimiter

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
        open_mode=boot.open_mode,
        extras={"embedded_pg": boot.pg},
        limiter=RateLimiter(settings.rate_limit_per_second, settings.rate_limit_burst),
        jobs=JobSlots(settings.max_long_jobs_per_key),
    )
    queue = state.queue = EmbeddingQueue(
        db, state.embedder, [t for f in features for t in f.embedding_targets], settings
    )
    failures = FailureLimiter(settings.auth_failure_limit)
    store = (
        None
        if boot.open_mode
        else KeyStore(db, parse_static_keys(settings.api_keys), settings.key_cache_seconds, failures)
    )
    catalog = state.catalog = Catalog(registry, settings.mcp_toolsets)
    mcp = build_mcp(state, store, catalog)
    return Assembly(settings, boot, features, state, queue, store, catalog, mcp, failures)


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
    state, db, store, mcp, boot, names = asm.state, asm.state.db, asm.store, asm.mcp, asm.boot, asm.names
    queue, features = asm.queue, asm.features

    def streamable_http_app(json_response: bool) -> Any:
        return mcp.streamable_http_app(
            stateless_http=True,
            json_response=json_response,
            host=settings.host,
            max_request_body_size=settings.max_body_bytes,
            transport_security=sdk_transport_security(settings),
        )

    # `auto`: the same server twice, answering with SSE streams and with single JSON bodies; the
    # ToolsetRouter picks per request (each app has its own session manager, both run below).
    mcp_app = streamable_http_app(settings.mcp_json_response is True)
    session_managers = [mcp.session_manager]
    mcp_json_app = None
    if settings.mcp_json_response == "auto":
        mcp_json_app = streamable_http_app(True)
        session_managers.append(mcp.session_manager)
    configure_logging(settings.log_level, settings.log_format)  # the SDK installs its own handler; keep ours

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with running(asm, host=settings.host, port=settings.port), contextlib.AsyncExitStack() as managers:
            for manager in session_managers:
                await managers.enter_async_context(manager.run())
            yield

    # Swagger UI and ReDoc from assets shipped in the fastapi-offline package, not a CDN.
    app = FastAPIOffline(
        title="Cairn",
        version=__version__,
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url="/redoc",
        openapi_url="/openapi.json",
        static_url="/docs/static",
    )
    app.state.cairn = state
    app.state.key_store = store
    app.state.mcp = mcp

    mcp_router: Any = ToolsetRouter(mcp_app, asm.catalog, send_error, json_app=mcp_json_app)
    guard: OpenModeGuard | None = None
    if boot.open_mode:  # a key created later locks this server at once (REST and MCP)
        guard = OpenModeGuard(KeyStore(db, [], settings.key_cache_seconds, asm.failures))
        mcp_router = OpenModeLock(mcp_router, guard)
    app.state.open_guard = guard
    streams = app.state.mcp_streams = StreamSlots(settings.max_sse_streams_per_key)
    # innermost: the HttpFront's request ids, browser checks and body limit still apply
    app.add_middleware(McpFastPath, mcp=mcp_router, store=store, streams=streams)

    @app.exception_handler(CairnError)
    async def cairn_error(request: Request, exc: CairnError) -> Response:
        if request.url.path.startswith(ui.CONSOLE_PATH + "/"):
            return ui.error_page(request, exc)
        return error_response(exc)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str | int]:
        return {"status": "ok", "pid": os.getpid()}  # the pid tells `--workers` processes apart

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        checks: dict[str, Any] = {"database": await db.ping()}
        try:
            checks["migrations"] = await migrations.at_head(boot.url, names)
        except Exception:
            checks["migrations"] = False
        try:
            await state.embedder.check()
            checks["embedder"] = True
        except Exception as exc:
            checks["embedder"] = False
            checks["embedder_error"] = str(exc)[:200]
        try:
            queued = await queue.stats()
            checks["embedding_queue"] = {"depth": queued.depth, "oldest_seconds": queued.oldest_seconds}
        except Exception:
            checks["embedding_queue"] = None
        ready = bool(checks["database"] and checks["migrations"] and checks["embedder"])
        return JSONResponse(
            {"status": "ready" if ready else "not ready", "checks": checks}, status_code=200 if ready else 503
        )

    @app.get("/metrics", include_in_schema=False)
    async def prometheus(request: Request) -> Response:
        await authenticate(request)  # any valid key when keys exist; open mode serves loopback only
        with contextlib.suppress(Exception):
            await queue.stats()  # refreshes the queue gauges
        body, ctype = metrics.render(db.pool_status())
        return PlainTextResponse(body, media_type=ctype)

    app.include_router(build_router(state))
    for feature in features:
        for router in feature.routers:
            app.include_router(router)

    sections = [*(s for feature in features for s in feature.console), *ui_admin.sections()]
    ui.install(app, state, sections, store, guard)

    @app.api_route("/api/v1/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
    async def unknown_route(rest: str) -> Response:
        raise NotFound(f"No such endpoint: /api/v1/{rest}", suggestions=["See /docs for the routes"])

    if store is not None:

        @app.get("/.well-known/oauth-protected-resource{suffix:path}", include_in_schema=False)
        async def protected_resource(suffix: str) -> dict[str, Any]:
            """RFC 9728 metadata naming only what exists: bearer API keys in the header, Cairn's three
            scopes, and no authorization server (keys come from `cairn keys create`, not OAuth)."""
            return {
                "resource": settings.resource_url(),
                "resource_name": "Cairn",
                "bearer_methods_supported": ["header"],
                "scopes_supported": ["read", "write", "admin"],
            }

    # Clients probe these before falling back to a bearer token; answer in JSON, not the MCP app's text 404.
    for probe in ("oauth-authorization-server", "openid-configuration"):

        @app.get(f"/.well-known/{probe}{{suffix:path}}", include_in_schema=False)
        async def no_authorization_server(suffix: str) -> Response:
            raise NotFound(
                "This server has no OAuth authorization server; send an API key as a bearer token",
                suggestions=["Create a key with `cairn keys create` and send `Authorization: Bearer <key>`"],
            )

    install_openapi(app, state)
    app.add_middleware(
        HttpFront,
        settings=settings,
        exempt=tuple(prefix for feature in features for prefix in feature.own_body_limit),
        multipart=multipart_paths(router for feature in features for router in feature.routers),
        open_guard=guard,
        open_mode=boot.open_mode,
    )
    app.mount("/", mcp_router)
    return app
