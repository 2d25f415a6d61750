"""app/datasets/service_profile.py: a profile's reply fitted to the token budget (`fit_profile`'s
ladder), on the real profile of the public penguins dataset computed by the engine in this process."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from app.core.errors import CairnError
from app.datasets import engine
from app.datasets.engine import profiling
from app.datasets.schemas import ProfileIn
from app.datasets.service_profile import _shrink, fit_profile
from tests.support.datasets import penguins_csv, small_engine_config


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], engine.Source]:
    cfg = small_engine_config(tmp_path_factory.mktemp("profile"), memory_limit="512MB", timeout_s=30.0)
    path = cfg.roots[0] / "penguins.csv"
    shutil.copy(penguins_csv(), path)
    src = engine.make_source("penguins", str(path), [path])
    return profiling.profile(cfg, src, sample_size=1000, compute_stats=True, max_categories=20), src


def fit(profiled: tuple[dict[str, Any], engine.Source], limit: int, **args: Any) -> Any:
    raw, src = profiled
    return fit_profile(raw, ProfileIn(file_path="penguins.csv", **args), src, False, limit)


def test_a_profile_within_the_budget_is_whole(profiled: tuple[dict[str, Any], engine.Source]) -> None:
    out = fit(profiled, 20_000, detail="full")
    assert not out.truncated and out.schema_.columns_omitted == 0 and len(out.schema_.columns) == 8
    assert out.context_tokens_used <= 20_000 and out.file_path == profiled[1].pattern
    compact = fit(profiled, 20_000)
    assert compact.schema_.columns[0] == profiling.summary_header() and len(compact.schema_.columns) == 9
    assert compact.statistics == out.statistics and not compact.cache_hit


def test_a_tight_budget_drops_details_then_columns(profiled: tuple[dict[str, Any], engine.Source]) -> None:
    whole = fit(profiled, 20_000, detail="full").context_tokens_used
    cut = fit(profiled, whole - 1, detail="full")
    assert cut.truncated and cut.context_tokens_used < whole and cut.schema_.columns_omitted == 0
    fewer = fit(profiled, 250, detail="full")
    assert fewer.truncated and fewer.context_tokens_used <= 250 and fewer.schema_.columns_omitted > 0
    assert len(fewer.schema_.columns) + fewer.schema_.columns_omitted == 8


def test_a_budget_below_the_least_profile_is_refused_with_the_least(
    profiled: tuple[dict[str, Any], engine.Source],
) -> None:
    with pytest.raises(CairnError) as caught:
        fit(profiled, 10)
    assert caught.value.code == 4001 and "max_tokens 10 is below the smallest profile" in caught.value.message
    least = int(caught.value.suggestions[0].rsplit(" ", 1)[1])
    assert fit(profiled, least).context_tokens_used <= least


def test_each_step_of_the_ladder() -> None:
    def column() -> dict[str, Any]:
        top = [[f"v{i}", 10 - i] for i in range(8)]
        return {"stats": {"top_values": top, "other_values": 2, "other_rows": 3}, "sample_values": ["a", "b"]}

    cols = [column()]
    _shrink(cols, "top5")
    assert cols[0]["stats"]["top_values"] == [[f"v{i}", 10 - i] for i in range(5)]
    assert (cols[0]["stats"]["other_values"], cols[0]["stats"]["other_rows"]) == (2 + 3, 3 + 5 + 4 + 3)
    _shrink(cols, "novalues")
    assert cols[0]["sample_values"] == ["a"]
    _shrink(cols, "nostats")
    assert cols[0]["stats"] is None
