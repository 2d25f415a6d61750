"""Alembic environment: async engine, one advisory lock so concurrent replicas migrate one at a time.

Under the lock, a database already at a newer build's revisions is left alone when every one of them
may run under older code, and refused otherwise (`migrations.newer_schema`); after migrating, the
applied revisions are recorded for older builds to read (`migrations.record_applied`)."""

from __future__ import annotations

import asyncio
import importlib
import os
from pathlib import Path

from alembic import context
from sqlalchemy import pool, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from app.core import migrations
from app.core.db import Base

config = context.config
if getattr(config.cmd_opts, "autogenerate", False):
    # Every family's models, for `alembic revision --autogenerate`. Plain upgrades (every start, every
    # `cairn migrate`) do not pay for importing the features; tests/e2e/test_migrations_and_features.py
    # loads them itself to compare the models with the migrated schema.
    for models in sorted(Path(__file__).resolve().parents[2].glob("*/models.py")):
        importlib.import_module(f"app.{models.parent.name}.models")
MIGRATION_LOCK = 7_401_339_113


def _url() -> str:
    url = (
        config.attributes.get("url")
        or context.get_x_argument(as_dictionary=True).get("url")
        or os.environ.get("CAIRN_DATABASE_URL")
    )
    if not url:
        raise RuntimeError("No database URL: set CAIRN_DATABASE_URL or use `cairn migrate`")
    return str(url)


def _run(connection: Connection) -> None:
    # The models are the schema: tests/test_migrations_and_features.py proves Alembic's comparison of the
    # upgraded database with this metadata finds no difference.
    context.configure(connection=connection, target_metadata=Base.metadata, transaction_per_migration=False)
    connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK})
    try:
        with context.begin_transaction():
            standing = migrations.newer_schema(connection)  # raises SchemaTooNew for an incompatible one
            if standing.newer:
                migrations.log.warning(
                    "the database schema is at a newer build's revisions (%s), all safe for this build: not migrating",
                    ", ".join(standing.newer),
                )
            else:
                context.run_migrations()
                migrations.record_applied(connection)
    finally:
        connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK})
        connection.commit()


async def _run_async() -> None:
    engine = create_async_engine(_url(), poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(_run)
    finally:
        await engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(_run_async())
    else:  # called from async code: Alembic is synchronous, so give it its own loop in a thread
        import threading

        errors: list[BaseException] = []

        def _target() -> None:
            try:
                asyncio.run(_run_async())
            except BaseException as exc:
                errors.append(exc)

        worker = threading.Thread(target=_target)
        worker.start()
        worker.join()
        if errors:
            raise errors[0]
