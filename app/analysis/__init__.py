"""Analysis sessions: ingest upstream data, store findings, query, act, clear (seed 000)."""

from __future__ import annotations

from app.analysis import cli, lifecycle, pages
from app.analysis.config import AnalysisSettings
from app.analysis.operations import ops
from app.analysis.service import EMBEDDING_TARGET
from app.core.feature import Feature

FEATURE = Feature(
    name="analysis",
    operations=ops,
    settings=AnalysisSettings,
    startup=lifecycle.startup,
    shutdown=lifecycle.shutdown,
    cli=cli.register,
    embedding_targets=(EMBEDDING_TARGET,),
    console=pages.SECTIONS,
)
