"""app/main.py on migrated databases of their own: start-up migrates and decides the auth mode (keys
close the server, and keep it closed once the database had one; a server beyond loopback without keys
refuses to start, a local stdio session needs none), the parts are assembled from the settings and the
enabled features (extra operation sets included), the HTTP app is built on them, and a worker that
cannot start exits with uvicorn's start-up failure code."""

from __future__ import annotations

import asyncio

import pytest
from uvicorn.config import STARTUP_FAILURE

from app.core import migrations
from app.core.auth import create_key
from app.core.config import Settings, get_settings
from app.core.db import Database
from app.core.registry import OperationSet
from app.main import assemble, bootstrap, create_app, create_worker_app
from tests.support.databases import migrated_url
from tests.support.server import PgCluster


def fresh(pg: PgCluster) -> str:
    return pg.handle.url(pg.new_database())


def test_start_up_migrates_and_decides_the_auth_mode(pg: PgCluster) -> None:
    url = fresh(pg)
    boot = bootstrap(Settings(database_url=url, features=["memory"]), ["memory"])
    assert (boot.url, boot.pg, boot.open_mode) == (url, None, True)  # no key, loopback: open
    assert asyncio.run(migrations.at_head(url, ["memory"]))
    with pytest.raises(RuntimeError, match=r"Refusing to serve on 0\.0\.0\.0 without API keys"):
        bootstrap(Settings(database_url=url, host="0.0.0.0"), ["memory"])
    assert bootstrap(Settings(database_url=url, host="0.0.0.0"), ["memory"], local=True).open_mode
    static = Settings(database_url=url, api_keys=["k" * 16 + ":read"])
    assert not bootstrap(static, ["memory"]).open_mode
    # A host started with keys locked the database: no key configured, it still requires one.
    assert not bootstrap(Settings(database_url=url), ["memory"]).open_mode
    assert not bootstrap(Settings(database_url=url, host="0.0.0.0"), ["memory"]).open_mode

    other = fresh(pg)  # a database that never had a key starts open, until a key is stored
    assert bootstrap(Settings(database_url=other), ["memory"]).open_mode

    async def stored_key() -> None:
        db = Database(other, Settings())
        try:
            await create_key(db, scopes=["read"], project=None)
        finally:
            await db.dispose()

    asyncio.run(stored_key())
    assert not bootstrap(Settings(database_url=other, host="0.0.0.0"), ["memory"]).open_mode  # a stored key


def test_without_migrating_on_start_the_schema_is_left_alone(pg: PgCluster) -> None:
    url = fresh(pg)
    boot = bootstrap(Settings(database_url=url, migrate_on_start=False, api_keys=["k" * 16]), [])
    assert not boot.open_mode  # a static key closes it; no stored key is looked for
    assert not asyncio.run(migrations.at_head(url, []))


def test_the_parts_are_assembled_from_the_settings(pg: PgCluster) -> None:
    extra = OperationSet("extra_ops", "test operations")
    settings = Settings(
        database_url=migrated_url(pg, ["memory", "graph"]), features=["memory", "graph"], rate_limit_per_second=3
    )
    asm = assemble(settings, [extra])
    try:
        state = asm.state
        assert asm.names == ["memory", "graph"] == state.features and asm.settings is settings
        names = {op.name for op in state.registry.operations}
        assert {"create_project", "audit_log"} <= names and not any(n.startswith("dataset") for n in names)
        assert "extra_ops" in state.registry.descriptions
        assert set(state.public_settings) and state.extras["embedded_pg"] is None
        assert state.queue is asm.queue and state.catalog is asm.catalog and state.limiter is not None
        assert state.jobs is not None and asm.callers is not None and asm.mcp is not None
    finally:
        asyncio.run(asm.state.db.dispose())


def test_the_http_app_is_built_on_the_parts(pg: PgCluster) -> None:
    app = create_app(Settings(database_url=migrated_url(pg, ["graph"]), features=["graph"]))
    state = app.state.cairn
    try:
        assert state.features == ["graph"] and app.state.mcp is not None
        documented = app.openapi()
        assert "/api/v1/projects" in documented["paths"] and "/api/v1/resources/health" in documented["paths"]
        assert any(p.startswith("/api/v1/graph") for p in documented["paths"])
        assert not any(p.startswith("/api/v1/memor") for p in documented["paths"])  # memory is not enabled
    finally:
        asyncio.run(state.db.dispose())


def test_a_worker_that_cannot_start_exits_with_the_start_up_failure_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_FEATURES", "no-such-feature")
    get_settings.cache_clear()
    try:
        with pytest.raises(SystemExit) as stopped:
            create_worker_app()
    finally:
        get_settings.cache_clear()
    assert stopped.value.code == STARTUP_FAILURE
