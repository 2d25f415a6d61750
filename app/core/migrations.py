"""Feature-tagged Alembic branches: `core` plus one branch per feature family.

The migrations ship inside the package: the environment and the core's revisions in
`app/core/alembic/`, each feature's revisions in `app/<feature>/migrations/` (branch label = the
feature's name). Upgrading runs `core@head` and `<feature>@head` for the enabled features only, so a
disabled family creates no tables.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from sqlalchemy.ext.asyncio import create_async_engine

ENV_DIR = Path(__file__).resolve().parent / "alembic"
APP_DIR = ENV_DIR.parents[1]


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


def branches(features: list[str]) -> list[str]:
    """Branch labels that exist for `features` (a feature without migrations has no branch)."""
    script = ScriptDirectory.from_config(alembic_config("postgresql+asyncpg://unused/none"))
    labels = {label for rev in script.walk_revisions() for label in (rev.branch_labels or ())}
    return ["core", *[f for f in features if f in labels]]


def feature_branches() -> list[str]:
    """Every feature that has a migration branch (the branch label is the feature's name)."""
    script = ScriptDirectory.from_config(alembic_config("postgresql+asyncpg://unused/none"))
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
    script = ScriptDirectory.from_config(alembic_config("postgresql+asyncpg://unused/none"))
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
    """True when every enabled branch is at its head: each head is recorded, or is a revision that a
    recorded one depends on (Alembic records only the dependent, e.g. memory_0003 for core_0005)."""
    current = await current_heads(url)
    if not current:
        return False
    script = ScriptDirectory.from_config(alembic_config("postgresql+asyncpg://unused/none"))
    try:
        applied = {rev.revision for rev in script.iterate_revisions(tuple(current), "base")}
    except RevisionError:  # a revision this code does not know: a newer schema
        return False
    return expected_heads(features) <= applied


async def upgrade_async(url: str, features: list[str]) -> None:
    """`upgrade` from async code (Alembic's env runs its own event loop in a worker thread)."""
    await asyncio.to_thread(upgrade, url, features)
