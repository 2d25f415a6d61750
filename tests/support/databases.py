"""Migrated databases for the unit tests, cloned from templates migrated once per test session.

Running every Alembic revision of the enabled branches on a fresh database is the slow part of a
database fixture; PostgreSQL copies a database from a template far faster. `migrated_url` migrates one
template per distinct feature set (per cluster) the first time that set is asked for, marks it a
template that takes no connections, and hands out a fresh clone on every call: each caller gets its
own database, exactly as migrated (tables, extensions, `alembic_version`, seeded rows).

Tests whose subject is the migrations themselves (upgrades, downgrades, start-up migrating) keep
migrating a `pg.new_database()` of their own.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, Literal

import httpx
import pytest
from sqlalchemy.engine import make_url

from app.core import migrations
from app.core.config import Settings
from app.core.db import Database
from tests.support.server import ADMIN_KEY, PgCluster, server_settings, start_server, stop_server

_templates: dict[tuple[str, tuple[str, ...]], str] = {}
# One template is migrated at a time; clones run outside the lock (PostgreSQL lets several copy one
# template at once, but refuses while anything is connected to it, which ALLOW_CONNECTIONS false rules out).
_lock = threading.Lock()


def _template(pg: PgCluster, features: tuple[str, ...]) -> str:
    """The template database of `features` on `pg`'s cluster, migrated on first use."""
    key = (str(pg.handle.pgdata), features)
    with _lock:
        name = _templates.get(key)
        if name is None:
            name = f"cairn_tmpl_{'_'.join(features) or 'core'}_{uuid.uuid4().hex[:8]}"
            pg.handle.psql("postgres", f'CREATE DATABASE "{name}"')
            # Alembic's engine is a NullPool disposed at the end: no connection outlives the upgrade.
            migrations.upgrade(pg.handle.url(name), list(features))
            pg.handle.psql("postgres", f'ALTER DATABASE "{name}" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false')
            _templates[key] = name
        return name


def migrated_url(pg: PgCluster, features: Iterable[str] = ()) -> str:
    """URL of a new database on `pg`'s cluster, upgraded to the heads of core and `features`.

    Blocking (psql and, the first time per feature set, Alembic); callable from sync or async code."""
    template = _template(pg, tuple(sorted(set(features))))
    name = f"cairn_t_{uuid.uuid4().hex[:10]}"
    pg.handle.psql("postgres", f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return pg.handle.url(name)


@asynccontextmanager
async def migrated_database(
    pg: PgCluster, features: Iterable[str] = (), settings: Settings | None = None
) -> AsyncIterator[Database]:
    """A `Database` on a new migrated database (see `migrated_url`), disposed on leaving."""
    database = Database(migrated_url(pg, features), settings or Settings())
    try:
        yield database
    finally:
        await database.dispose()


def database_fixture(
    features: Iterable[str] = (),
    *,
    scope: Literal["session", "package", "module", "class", "function"] = "module",
    settings: Settings | None = None,
) -> Callable[..., Any]:
    """A pytest fixture yielding a `Database` on its own migrated database; assign it to the fixture's
    name in the test module: `db = database_fixture(["graph"])`."""
    wanted = list(features)

    @pytest.fixture(scope=scope)
    async def fixture(pg: PgCluster) -> AsyncIterator[Database]:
        async with migrated_database(pg, wanted, settings) as database:
            yield database

    return fixture


@asynccontextmanager
async def own_server(
    pg: PgCluster, features: Iterable[str] = ("memory",)
) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A test server (all test settings) serving `features` on a new migrated database of its own, and an
    admin REST client on it; yields the client and the database's libpq URI. For tests whose figures
    depend on the whole table, as BM25's statistics do, or that count rows: what the rest of the suite
    stores in the shared database cannot move them."""
    wanted = list(features)
    url = migrated_url(pg, wanted)
    settings = server_settings(url, features=wanted)
    srv, thread, _app = start_server(settings)
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{settings.port}", timeout=60, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        ) as client:
            yield client, pg.handle.libpq_uri(str(make_url(url).database))
    finally:
        stop_server(srv, thread)
