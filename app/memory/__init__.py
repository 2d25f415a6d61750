"""Memory: one store with two dialects, Rusty Memory (push / search / summarize / collections,
seed 001) and AMCS thoughts (seed 004)."""

from __future__ import annotations

from app.core.feature import Feature
from app.memory import cli, lifecycle, pages
from app.memory.config import MemorySettings, public_settings
from app.memory.operations import ops
from app.memory.service_common import EMBEDDING_TARGET

FEATURE = Feature(
    name="memory",
    operations=ops,
    settings=MemorySettings,
    public_settings=public_settings,
    cli=cli.register,
    startup=lifecycle.startup,
    shutdown=lifecycle.shutdown,
    embedding_targets=(EMBEDDING_TARGET,),
    console=pages.SECTIONS,
)
