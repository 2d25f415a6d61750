"""The HTTP application built from the assembled parts: the front, the MCP endpoint, REST, the
features' own routes, the console, the probes and the API docs.

A request crosses the `HttpFront` (request id, browser checks, body limit), then `Shortcut`, which
hands `/mcp` paths to the `McpEndpoint` before any route is tried; every other path tries the routes
and ends at the endpoint's mount at `/` (the SDK's own 404)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi_offline import FastAPIOffline
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp

from app import __version__
from app.core import ui, ui_admin
from app.core.config import Settings
from app.core.context import AppState
from app.core.errors import CairnError, NotFound
from app.core.feature import Feature
from app.core.http.callers import Callers
from app.core.http.front import HttpFront, error_response, multipart_paths, sdk_transport_security
from app.core.http.mcp_adapter import CairnMCPServer
from app.core.http.mcp_endpoint import McpEndpoint, Shortcut
from app.core.http.openapi import install_docs, install_openapi
from app.core.http.probes import probes_router
from app.core.http.rest_adapter import API_PREFIX, build_router
from app.core.logs import configure_logging
from app.core.ratelimit import StreamSlots
from app.core.toolsets import Catalog

DOCS_STATIC = "/docs/static"


def build_http_app(
    state: AppState,
    callers: Callers,
    mcp: CairnMCPServer,
    catalog: Catalog,
    features: Sequence[Feature],
    *,
    database_url: str,
    running: Callable[[], AbstractAsyncContextManager[None]],
) -> FastAPI:
    """The application; `running` starts and stops the process's parts around it (its lifespan)."""
    settings = state.settings
    sdk_app, transport, json_transport, managers = _sdk_apps(mcp, settings)
    configure_logging(settings.log_level, settings.log_format)  # the SDK installs its own handler; keep ours

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with running(), contextlib.AsyncExitStack() as stack:
            for manager in managers:
                await stack.enter_async_context(manager.run())
            yield

    # Swagger UI and ReDoc from assets shipped in the fastapi-offline package, not a CDN (Swagger UI's
    # validator badge is an image from swagger.io: off; ReDoc's page is `install_docs`').
    app = FastAPIOffline(
        title="Cairn",
        version=__version__,
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
        static_url=DOCS_STATIC,
        swagger_ui_parameters={"validatorUrl": None},
    )
    install_docs(app, static_url=DOCS_STATIC)
    app.state.cairn = state
    app.state.callers = callers
    app.state.mcp = mcp
    streams = app.state.mcp_streams = state.streams or StreamSlots(settings.max_sse_streams_per_key)
    endpoint = McpEndpoint(
        sdk_app, catalog=catalog, callers=callers, streams=streams, transport=transport, json_transport=json_transport
    )
    app.add_middleware(Shortcut, endpoint=endpoint)  # innermost: the front's checks still apply

    @app.exception_handler(CairnError)
    async def cairn_error(request: Request, exc: CairnError) -> Response:
        if request.url.path.startswith(ui.CONSOLE_PATH + "/"):
            return ui.error_page(request, exc)
        return error_response(exc)

    app.include_router(probes_router(state, callers, database_url))
    app.include_router(build_router(state))
    for feature in features:
        for router in feature.routers:
            app.include_router(router)
    sections = [*(s for feature in features for s in feature.console), *ui_admin.sections()]
    ui.install(app, state, sections, callers)

    @app.api_route(
        f"{API_PREFIX}/{{rest:path}}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False
    )
    async def unknown_route(rest: str) -> Response:
        raise NotFound(f"No such endpoint: {API_PREFIX}/{rest}", suggestions=["See /docs for the routes"])

    install_openapi(app, state)
    app.add_middleware(
        HttpFront,
        settings=settings,
        exempt=tuple(prefix for feature in features for prefix in feature.own_body_limit),
        multipart=multipart_paths(router for feature in features for router in feature.routers),
        callers=callers,
    )
    app.mount("/", endpoint)
    return app


def _sdk_apps(mcp: CairnMCPServer, settings: Settings) -> tuple[Any, Any, Any, list[Any]]:
    """The SDK's app (its routes beside `/mcp`: the protected-resource metadata, its 404s); its
    streamable HTTP transport answering with SSE streams (or JSON bodies, `CAIRN_MCP_JSON_RESPONSE=true`);
    with `auto` also a transport of the same server answering with JSON bodies (the endpoint picks per
    request); and the session managers they need running.

    The endpoint hands `/mcp` requests to a transport itself, with the caller it resolved: the SDK's
    app would wrap them in its own routing and bearer-token middleware, a second look-up of the key
    and a measurable share of a trivial call."""

    def streamable_http_app(json_response: bool) -> Any:
        return mcp.streamable_http_app(
            stateless_http=True,
            json_response=json_response,
            host=settings.host,
            max_request_body_size=settings.max_body_bytes,
            transport_security=sdk_transport_security(settings),
        )

    sdk_app = streamable_http_app(settings.mcp_json_response is True)
    managers = [mcp.session_manager]
    json_transport = None
    if settings.mcp_json_response == "auto":
        streamable_http_app(True)
        managers.append(mcp.session_manager)
        json_transport = StreamableHTTPASGIApp(managers[1])
    return sdk_app, StreamableHTTPASGIApp(managers[0]), json_transport, managers
