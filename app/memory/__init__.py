"""Memory: one store with two dialects, Rusty Memory (push / search / summarize / collections,
seed 001) and AMCS thoughts (seed 004)."""

from __future__ import annotations

from pydantic import BaseModel

from app.core.context import AppState, feature_settings_of
from app.core.feature import Feature
from app.memory import cli, pages
from app.memory.config import MemorySettings
from app.memory.lifecycle import BackfillRunner
from app.memory.operations import ops
from app.memory.schemas import SearchDefaults
from app.memory.service_common import EMBEDDING_TARGET


def public_settings(settings: MemorySettings) -> dict[str, BaseModel]:
    """The `search` section of mcp://settings."""
    return {
        "search": SearchDefaults(
            default_limit=settings.search_default_limit,
            max_limit=settings.search_max_limit,
            default_score_threshold=settings.search_default_score_threshold,
        )
    }


async def startup(state: AppState) -> None:
    """Start the background backfill runner (CAIRN_BACKFILL_ENABLED)."""
    runner = BackfillRunner(state.db, state.embedder.model, feature_settings_of(state.feature_settings, MemorySettings))
    runner.start()
    state.extras["memory_backfill"] = runner


async def shutdown(state: AppState) -> None:
    """Stop the background backfill runner."""
    runner = state.extras.pop("memory_backfill", None)
    if isinstance(runner, BackfillRunner):
        await runner.stop()


FEATURE = Feature(
    name="memory",
    operations=ops,
    settings=MemorySettings,
    public_settings=public_settings,
    cli=cli.register,
    startup=startup,
    shutdown=shutdown,
    embedding_targets=(EMBEDDING_TARGET,),
    console=pages.SECTIONS,
)
