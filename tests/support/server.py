"""Helpers of the end-to-end tests: the test keys, a real server on 127.0.0.1 (uvicorn in a
thread), the real MCP client over streamable HTTP, and small polling utilities."""

from __future__ import annotations

import asyncio
import json
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import uvicorn
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import TextContent, TextResourceContents
from pydantic_settings import BaseSettings

from app.core.config import Settings
from app.core.context import feature_settings_of
from app.core.pgembedded import EmbeddedPostgres
from app.main import create_app

S = TypeVar("S", bound=BaseSettings)
ADMIN_KEY = "test-admin-key-0123456789"
WRITE_KEY = "test-write-key-0123456789"
READ_KEY = "test-read-key-01234567890"
PROJECT_KEY = "test-proj-key-01234567890"
BOUND_PROJECT = "bound-proj"
STATIC_KEYS = [
    f"{ADMIN_KEY}:admin",
    f"{WRITE_KEY}:read+write",
    f"{READ_KEY}:read",
    f"{PROJECT_KEY}:read+write:{BOUND_PROJECT}",
]


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgCluster:
    """The session's embedded cluster plus the throwaway database made for this run."""

    handle: EmbeddedPostgres
    database: str

    @property
    def url(self) -> str:
        return self.handle.url(self.database)

    def new_database(self) -> str:
        """Another empty database on the same cluster (for migration and replica tests)."""
        name = f"cairn_t_{uuid.uuid4().hex[:10]}"
        self.handle.ensure_database(name)
        return name


@dataclass
class RunningServer:
    """A Cairn server running in this process on 127.0.0.1."""

    url: str
    settings: Settings
    app: Any


def serve_app(app: Any, port: int, name: str) -> tuple[uvicorn.Server, threading.Thread]:
    """Serve an ASGI app (a test upstream) on 127.0.0.1:`port` from a background thread; returns once
    it accepts requests (within 30 s, else RuntimeError naming it)."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, log_level="warning"))
    thread = threading.Thread(target=server.run, name=f"{name}-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} upstream did not start")
        time.sleep(0.02)
    return server, thread


def start_server(settings: Settings, extra: list[Any] | None = None) -> tuple[uvicorn.Server, threading.Thread, Any]:
    """Build the app and serve it from a background thread; returns once it accepts requests."""
    app = create_app(settings, extra=extra)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        lifespan="on",
        timeout_keep_alive=settings.http_keep_alive_seconds,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{settings.port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.05)
    return server, thread, app


def stop_server(server: uvicorn.Server, thread: threading.Thread) -> None:
    """Ask uvicorn to exit and wait for it."""
    server.should_exit = True
    thread.join(timeout=30)


def server_settings(db_url: str, **overrides: Any) -> Settings:
    """Settings for a test server on a free port."""
    values: dict[str, Any] = {
        "database_url": db_url,
        "host": "127.0.0.1",
        "port": free_port(),
        "api_keys": STATIC_KEYS,
        "data_dir": Path(tempfile.mkdtemp(prefix="cairn-data-")),
        "log_level": "WARNING",
        "key_cache_seconds": 0.0,
        "rate_limit_per_second": 10_000.0,
        "rate_limit_burst": 10_000,
        "mcp_toolsets": ["all"],
        # Writes wait for their own vectors, so scenarios read what they wrote; the queue's
        # asynchronous path has its own tests (tests/e2e/test_embedding_queue.py).
        "embedding_write_mode": "sync",
    }
    values.update(overrides)
    return Settings(**values)


@asynccontextmanager
async def mcp_client(
    url: str, key: str | None = ADMIN_KEY, path: str = "/mcp", **session_kw: Any
) -> AsyncIterator[ClientSession]:
    """A real MCP client session over streamable HTTP (`path`: the endpoint, e.g. `/mcp/graph`)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as http:
        async with streamable_http_client(f"{url}{path}", http_client=http) as (read, write):
            async with ClientSession(read, write, **session_kw) as session:
                await session.initialize()
                yield session


@contextmanager
def overridden(server: RunningServer, cls: type[S], **changes: Any) -> Iterator[S]:
    """Run the block with the running server's `cls` feature settings changed (restored after)."""
    store = server.app.state.cairn.feature_settings
    before = feature_settings_of(store, cls)
    changed = before.model_copy(update=changes)
    store[cls] = changed
    try:
        yield changed
    finally:
        store[cls] = before


def text_of(result: Any) -> str:
    """The text of an MCP tool result's first content block (which must be text)."""
    first = result.content[0]
    assert isinstance(first, TextContent), f"expected text content, got {type(first).__name__}"
    return first.text


def resource_text(result: Any) -> str:
    """The text of an MCP resource read's first content block (which must be text)."""
    first = result.contents[0]
    assert isinstance(first, TextResourceContents), f"expected text contents, got {type(first).__name__}"
    return first.text


def error_of(result: Any) -> dict[str, Any]:
    """The error object of an isError MCP tool result."""
    assert result.is_error, f"expected an error result, got {result}"
    error: dict[str, Any] = json.loads(text_of(result))["error"]
    return error


def wait_for(predicate: Any, timeout: float = 30.0, interval: float = 0.1) -> None:
    """Poll until `predicate()` is truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError("condition not met in time")


def run_async(coro: Any) -> Any:
    """Run a coroutine from sync code."""
    return asyncio.run(coro)


ROOT = Path(__file__).resolve().parents[2]
