"""app/datasets/engine/profiling.py: profiles and samples show values as answers render them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.datasets.engine import databases, profiling, rendering, sources
from tests.support.datasets import small_engine_config


@pytest.fixture
def cfg(tmp_path: Path) -> databases.EngineConfig:
    """A small engine configuration: one CSV in its root, a 1 s time limit."""
    return small_engine_config(tmp_path, memory_limit="512MB", timeout_s=1.0)


def test_a_sample_cuts_long_values_in_sql(cfg: databases.EngineConfig) -> None:
    path = cfg.roots[0] / "long.csv"
    path.write_text("id,note\n" + "".join(f"{i},{'n' * 5000}\n" for i in range(3)))
    src = sources.make_source("long", str(path), [path])

    def fetched(con: Any) -> list[Any]:
        rows: list[Any] = con.execute(
            f"SELECT {rendering.capped_columns(con, 'long', ['id', 'note'])} FROM long"
        ).fetchall()
        return rows

    assert [len(note) for _, note in databases.run_locked(cfg, [src], fetched)] == [301] * 3
    sampled = profiling.sample(cfg, src, strategy="random", size=2, columns=None, stratify_column=None, seed=1)
    assert [row["note"] for row in sampled["rows"]] == ["n" * 300 + "…"] * 2


def test_dates_a_csv_writes_its_own_way_are_shown_in_iso(cfg: databases.EngineConfig) -> None:
    """DuckDB answers a cast to VARCHAR of a CSV column with the column's raw text: what a sample and a
    profile show is the text of the parsed value."""
    path = cfg.roots[0] / "dmy.csv"
    path.write_text("id,day,at\n1,29/02/2024,1:02:03\n2,01/03/2024,13:00:00\n")
    src = sources.make_source("dmy", str(path), [path])
    sampled = profiling.sample(cfg, src, strategy="head", size=2, columns=None, stratify_column=None, seed=1)
    assert sampled["rows"] == [
        {"id": 1, "day": "2024-02-29", "at": "01:02:03"},
        {"id": 2, "day": "2024-03-01", "at": "13:00:00"},
    ]
    prof = profiling.profile(cfg, src, sample_size=100, compute_stats=True, max_categories=10)
    day = next(c for c in prof["schema"]["columns"] if c["name"] == "day")
    assert day["sample_values"] == ["2024-02-29", "2024-03-01"]
    assert day["stats"] == {"min": "2024-02-29", "max": "2024-03-01"}
