"""app/datasets/engine/query.py: a query's result stored and read back, pages and summaries of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.datasets.engine import databases, query
from tests.support.datasets import small_engine_config


@pytest.fixture
def cfg(tmp_path: Path) -> databases.EngineConfig:
    """A small engine configuration: one CSV in its root, a 1 s time limit."""
    return small_engine_config(tmp_path, memory_limit="512MB", timeout_s=1.0)


LONG = "é" * 1000


def stored(cfg: databases.EngineConfig, sql: str) -> Path:
    """`sql`'s result written as a stored result (in this process)."""
    return query.execute_to_store(cfg, sql, [], {}, cfg.results / "q_cut.parquet", 1000).path


def test_a_summary_cuts_the_extremes_of_long_values(cfg: databases.EngineConfig) -> None:
    path = stored(cfg, "SELECT repeat('m', 100000) || range AS t FROM range(3)")
    summary = query.summarize_stored(cfg, path)
    assert summary["rows"] == 3 and summary["columns"]["t"]["min"] == "m" * 40 + "…"
