"""Memory: one store with two dialects, Rusty Memory (push / search / summarize / collections,
seed 001) and AMCS thoughts (seed 004)."""

from __future__ import annotations

from pydantic import BaseModel

from app.core.feature import Feature
from app.memory import cli
from app.memory.config import MemorySettings
from app.memory.operations import ops
from app.memory.schemas import SearchDefaults


def public_settings(settings: MemorySettings) -> dict[str, BaseModel]:
    """The `search` section of mcp://settings."""
    return {
        "search": SearchDefaults(
            default_limit=settings.search_default_limit,
            max_limit=settings.search_max_limit,
            default_score_threshold=settings.search_default_score_threshold,
        )
    }


FEATURE = Feature(
    name="memory", operations=ops, settings=MemorySettings, public_settings=public_settings, cli=cli.register
)
