"""Helpers of the analysis tests: the bookshelf demo upstream on 127.0.0.1 and a registry for it."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml

from app.analysis.config import DEMO_REGISTRY, AnalysisSettings
from app.analysis.demo_upstream import create_demo_app, generate
from app.core.context import feature_settings_of
from tests.support.server import RunningServer, free_port

N_BOOKS = 600
TOKEN = "demo-upstream-secret"


@dataclass
class Upstream:
    """A running demo upstream and the registry file pointing at it."""

    url: str
    registry: Path

    def control(self, path: str, body: Any = None) -> Any:
        r = (
            httpx.post(f"{self.url}/__control/{path}", json=body, timeout=10)
            if body is not None or path == "reset"
            else httpx.get(f"{self.url}/__control/{path}", timeout=10)
        )
        r.raise_for_status()
        return r.json()

    def faults(self, *rules: dict[str, Any]) -> None:
        self.control("faults", list(rules))

    def stats(self) -> dict[str, Any]:
        return self.control("stats")  # type: ignore[no-any-return]

    def rewrite_registry(self, **upstream_overrides: Any) -> None:
        """Re-write the registry with different upstream settings (timeouts, retries...)."""
        write_registry(self.registry, self.url, **upstream_overrides)


def write_registry(path: Path, base: str, **overrides: Any) -> None:
    """The demo registry, pointed at `base`, with the bearer credential read from the environment and
    short timeouts for tests."""
    doc = yaml.safe_load(DEMO_REGISTRY.read_text())
    up = doc["upstreams"]["bookshelf"]
    up.update(
        base_url=f"{base}/api",
        timeout_seconds=2.0,
        max_retries=2,
        backoff_seconds=0.05,
        max_retry_after_seconds=5,
        auth={"header": "Authorization", "scheme": "Bearer", "value_env": "CAIRN_TEST_BOOKSHELF_TOKEN"},
    )
    up.update(overrides)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.fixture(scope="session")
def upstream() -> Iterator[Upstream]:
    """The demo upstream (N_BOOKS books, bearer token required) and CAIRN_ANALYSIS_UPSTREAMS set to it."""
    port = free_port()
    app = create_demo_app(N_BOOKS, token=TOKEN)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_config=None, log_level="warning", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="demo-upstream", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("demo upstream did not start")
        time.sleep(0.02)
    registry = Path(tempfile.mkdtemp(prefix="cairn-analysis-")) / "upstreams.yaml"
    url = f"http://127.0.0.1:{port}"
    write_registry(registry, url)
    saved = {k: os.environ.get(k) for k in ("CAIRN_ANALYSIS_UPSTREAMS", "CAIRN_TEST_BOOKSHELF_TOKEN")}
    os.environ["CAIRN_ANALYSIS_UPSTREAMS"] = str(registry)
    os.environ["CAIRN_TEST_BOOKSHELF_TOKEN"] = TOKEN
    try:
        yield Upstream(url=url, registry=registry)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.should_exit = True
        thread.join(timeout=10)


def analysis_settings(server: RunningServer, monkeypatch: pytest.MonkeyPatch, **changes: Any) -> None:
    """Change the running server's analysis settings (read once at its start) for one test: as
    `tests.support.server.overridden` does for a block, restored when the test ends."""
    store = server.app.state.cairn.feature_settings
    changed = feature_settings_of(store, AnalysisSettings).model_copy(update=changes)
    monkeypatch.setitem(store, AnalysisSettings, changed)


@pytest.fixture
def bookshelf(
    upstream: Upstream, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Upstream]:
    """The upstream reset to its seeded data and default registry before the test (the test's shared
    server pointed at that registry; a server started later reads CAIRN_ANALYSIS_UPSTREAMS)."""
    upstream.control("reset")
    write_registry(upstream.registry, upstream.url)
    if "server" in request.fixturenames:
        analysis_settings(request.getfixturevalue("server"), monkeypatch, upstreams=upstream.registry)
    yield upstream
    upstream.control("reset")


def expected_books() -> list[dict[str, Any]]:
    """The demo data the upstream serves after a reset."""
    return list(generate(N_BOOKS).books.values())


def structured(result: Any) -> dict[str, Any]:
    """The structured content of a successful MCP tool result."""
    assert not result.is_error, result.content[0].text if result.content else result
    return result.structured_content  # type: ignore[no-any-return]
