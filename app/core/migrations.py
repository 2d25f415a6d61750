"""Feature-tagged Alembic branches: `core` plus one branch per feature family.

The migrations ship inside the package: the environment and the core's revisions in
`app/core/alembic/`, each feature's revisions in `app/<feature>/migrations/` (branch label = the
feature's name). Upgrading runs `core@head` and `<feature>@head` for the enabled features only, so a
disabled family creates no tables.

Rolling deploys (expand/contract, docs/reliability.md): every revision declares `older_code_may_run`,
and each upgrade records the applied revisions with that flag, their down revisions and the build
(`schema_revisions`, `record_applied`). A build that finds the database at revisions it does not have
walks that record down to revisions it knows (`newer_schema`): it runs without migrating when every
newer revision may run under older code, and refuses to start (`SchemaTooNew`) otherwise.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import Script, ScriptDirectory
from alembic.util import to_tuple
from sqlalchemy import RowMapping, inspect, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from app import __version__
from app.core.models import SchemaRevision

ENV_DIR = Path(__file__).resolve().parent / "alembic"
APP_DIR = ENV_DIR.parents[1]
log = logging.getLogger("cairn.migrations")


class SchemaTooNew(RuntimeError):
    """The database is at a revision this build does not have and cannot run under."""


def version_locations() -> list[Path]:
    """Where revisions live: the core's, then every feature package's `migrations/` folder."""
    return [ENV_DIR / "versions", *sorted(p for p in APP_DIR.glob("*/migrations") if p.is_dir())]


def alembic_config(url: str) -> Config:
    """Alembic configuration bound to `url`, built in code so an installed wheel needs no ini file."""
    cfg = Config()
    cfg.set_main_option("script_location", str(ENV_DIR))
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("version_locations", os.pathsep.join(str(p) for p in version_locations()))
    cfg.attributes["url"] = url
    return cfg


@functools.cache
def script_directory() -> ScriptDirectory:
    """This build's revisions (read once per process)."""
    return ScriptDirectory.from_config(alembic_config("postgresql+asyncpg://unused/none"))


def branches(features: list[str]) -> list[str]:
    """Branch labels that exist for `features` (a feature without migrations has no branch)."""
    script = script_directory()
    labels = {label for rev in script.walk_revisions() for label in (rev.branch_labels or ())}
    return ["core", *[f for f in features if f in labels]]


def feature_branches() -> list[str]:
    """Every feature that has a migration branch (the branch label is the feature's name)."""
    script = script_directory()
    labels = {label for rev in script.walk_revisions() for label in (rev.branch_labels or ())}
    return sorted(labels - {"core"})


def upgrade(url: str, features: list[str]) -> None:
    """Upgrade core and the enabled features to their heads (blocking; run it in a thread)."""
    cfg = alembic_config(url)
    for branch in branches(features):
        command.upgrade(cfg, f"{branch}@head")


def downgrade_branch(url: str, branch: str) -> None:
    """Remove every revision of one feature branch (`core` last: features depend on it)."""
    command.downgrade(alembic_config(url), f"{branch}@base")


def expected_heads(features: list[str]) -> set[str]:
    """Head revisions of the enabled branches."""
    script = script_directory()
    heads: set[str] = set()
    for branch in branches(features):
        heads |= {rev.revision for rev in script.get_revisions(f"{branch}@head") if rev is not None}
    return heads


async def current_heads(url: str) -> set[str]:
    """Revisions recorded in the database's alembic_version table."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(lambda c: set(MigrationContext.configure(c).get_current_heads()))
    finally:
        await engine.dispose()


async def at_head(url: str, features: list[str]) -> bool:
    """True when this build can serve on the database's schema: every enabled branch is at its head,
    or past it only by newer builds' revisions recorded as safe for older code (`newer_schema`)."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(lambda c: fits(c, features))
    finally:
        await engine.dispose()


def fits(connection: Connection, features: list[str]) -> bool:
    """`at_head` on an open connection."""
    try:
        standing = newer_schema(connection)
    except SchemaTooNew:
        return False
    if not standing.known:
        return False
    script = script_directory()
    # Alembic records only the dependent of a dependency (e.g. memory_0003 for core_0005): walk down.
    applied = {rev.revision for rev in script.iterate_revisions(tuple(standing.known), "base")}
    return expected_heads(features) <= applied


def older_code_may_run(rev: Script) -> bool:
    """A revision's declared `older_code_may_run` (False when it declares none: assume a contract)."""
    return getattr(rev.module, "older_code_may_run", None) is True


@functools.cache
def known_revisions() -> frozenset[str]:
    """Every revision this build has."""
    return frozenset(rev.revision for rev in script_directory().walk_revisions())


@dataclass(frozen=True)
class Standing:
    """The database's schema as this build sees it: the revisions at its top this build has
    (`known`), and the newer builds' revisions above them (`newer`, each safe for older code)."""

    known: frozenset[str]
    newer: tuple[str, ...]


def newer_schema(connection: Connection) -> Standing:
    """Where the database's schema stands for this build (see `Standing`).

    Raises:
        SchemaTooNew: a revision this build does not have is not safe for older code, or is not
            recorded at all; the message names it and the build that is needed.
    """
    heads = MigrationContext.configure(connection).get_current_heads()
    known = {h for h in heads if h in known_revisions()}
    todo = [h for h in heads if h not in known]
    if not todo:
        return Standing(frozenset(known), ())
    records = _records(connection)
    newer: list[str] = []
    while todo:
        rev = todo.pop()
        if rev in newer:
            continue
        record = records.get(rev)
        where = "is at" if rev in heads else "includes"
        if record is None:
            raise SchemaTooNew(
                f"the database schema {where} {rev}, which this build ({__version__}) does not have and no "
                "build recorded: deploy the build that wrote it"
            )
        if not record["older_code_may_run"]:
            build = record["build"]
            raise SchemaTooNew(
                f"the database schema {where} {rev} (written by build {build}); this build "
                f"({__version__}) cannot run on it: deploy build {build} or newer"
            )
        newer.append(rev)
        for down in record["down_revisions"]:
            if down in known_revisions():
                known.add(down)
            else:
                todo.append(down)
    return Standing(frozenset(known), tuple(newer))


def _records(connection: Connection) -> dict[str, RowMapping]:
    """The revision log by revision ({} before `core_0007` created it)."""
    if not inspect(connection).has_table(SchemaRevision.__tablename__):
        return {}
    return {row["revision"]: row for row in connection.execute(select(SchemaRevision.__table__)).mappings()}


def record_applied(connection: Connection) -> int:
    """Record every applied revision this build has and the log lacks (with its flag, its down
    revisions and this build's version); returns how many were added."""
    heads = MigrationContext.configure(connection).get_current_heads()
    if not heads or not inspect(connection).has_table(SchemaRevision.__tablename__):
        return 0
    script = script_directory()
    rows = [
        {
            "revision": rev.revision,
            "down_revisions": list(to_tuple(rev.down_revision, default=())),
            "older_code_may_run": older_code_may_run(rev),
            "build": __version__,
        }
        for rev in script.iterate_revisions(tuple(heads), "base")
        if isinstance(rev, Script)
    ]
    recorded = set(_records(connection))
    missing = [row for row in rows if row["revision"] not in recorded]
    if missing:
        connection.execute(insert(SchemaRevision).values(missing).on_conflict_do_nothing())
    return len(missing)


async def upgrade_async(url: str, features: list[str]) -> None:
    """`upgrade` from async code (Alembic's env runs its own event loop in a worker thread)."""
    await asyncio.to_thread(upgrade, url, features)
