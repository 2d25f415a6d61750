"""app/datasets/service_profile.py: a profile's reply fitted to the token budget (`fit_profile`'s
ladder), on the real profile of the public penguins dataset computed by the engine in this process."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from app.core.errors import CairnError
from app.datasets import engine
from app.datasets.engine import profiling
from app.datasets.schemas import ProfileIn, SampleIn
from app.datasets.service_profile import _shrink, fit_profile, sample_cut, selected, shown_groups
from tests.support.datasets import penguins_csv, small_engine_config


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], engine.Source]:
    cfg = small_engine_config(tmp_path_factory.mktemp("profile"), memory_limit="512MB", timeout_s=30.0)
    path = cfg.roots[0] / "penguins.csv"
    shutil.copy(penguins_csv(), path)
    src = engine.make_source("penguins", str(path), [path])
    return profiling.profile(cfg, src, sample_size=1000, compute_stats=True, max_categories=20), src


def fit(profiled: tuple[dict[str, Any], engine.Source], limit: int, default: bool = False, **args: Any) -> Any:
    """The reply within `limit` tokens, asked as the call's max_tokens (or as the default budget)."""
    raw, src = profiled
    asked = ProfileIn(file_path="penguins.csv", max_tokens=None if default else min(max(limit, 50), 20_000), **args)
    return fit_profile(raw, asked, src, False, limit)


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
    assert cut.cut is not None and cut.cut.next_call is not None
    assert cut.cut.next_call.tool == "profile_dataset" and cut.cut.next_call.args == {"max_tokens": whole}
    fewer = fit(profiled, 300, detail="full")
    assert fewer.truncated and fewer.context_tokens_used <= 300 and fewer.schema_.columns_omitted > 0
    assert len(fewer.schema_.columns) + fewer.schema_.columns_omitted == 8
    # The cut names every column it left out, the last ones, and why.
    assert fewer.cut is not None and fewer.cut.reason == "max_tokens 300"
    names = ["species", "island", "bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "sex", "year"]
    left = names[len(fewer.schema_.columns) :]
    assert f"columns {', '.join(left)}" in fewer.cut.left_out, fewer.cut


def test_a_cut_summary_strips_the_last_columns_first(profiled: tuple[dict[str, Any], engine.Source]) -> None:
    raw, src = profiled
    # 30 columns with long ranges: bare lines (no stats) show every column where whole ones would not.
    year = next(c for c in raw["schema"]["columns"] if c["name"] == "year")
    stats = {**year["stats"], "min": 1_234_567_890_123, "max": 9_876_543_210_987}
    wide = {**raw, "schema": {"columns": [{**year, "name": f"c{i}", "stats": stats} for i in range(30)]}}
    whole = fit((wide, src), 20_000)
    assert whole.cut is None and "cut" not in whole.model_dump(by_alias=True, mode="json")
    out = fit((wide, src), whole.context_tokens_used - 60)
    assert out.truncated and out.cut is not None and out.schema_.columns_omitted == 0
    lines, shown = whole.schema_.columns[1:], out.schema_.columns[1:]
    # The first lines are whole, the last ones bare (name, type, null %, distinct count): the cut says which.
    bare = [i for i, (a, b) in enumerate(zip(lines, shown, strict=True)) if a != b]
    assert bare and bare == list(range(bare[0], 30)) and bare[0] > 0, (lines, shown)
    assert all(str(line).endswith(",,") for line in shown[bare[0] :])
    assert f"stats/samples of columns {bare[0] + 1}-30 (c{bare[0]}..c29)" == out.cut.left_out, out.cut
    assert out.cut.next_call is not None and out.cut.next_call.args == {"max_tokens": whole.context_tokens_used}


def test_the_default_budget_is_the_profile_s(profiled: tuple[dict[str, Any], engine.Source]) -> None:
    out = fit(profiled, 400, default=True)
    assert out.context_tokens_used <= 400
    if out.cut is not None:
        assert out.cut.reason == "max_tokens 400 (default)" and out.cut.next_call is not None


def test_columns_selects_the_reply_s_columns(profiled: tuple[dict[str, Any], engine.Source]) -> None:
    out = fit(profiled, 20_000, columns=["sex", "island"], detail="full")
    assert [c.name for c in out.schema_.columns] == ["island", "sex"]
    with pytest.raises(CairnError) as caught:
        fit(profiled, 20_000, columns=["island", "nope"])
    assert caught.value.code == 4003 and "nope" in caught.value.message and "species" in caught.value.suggestions[0]


def test_recommendations_of_selected_columns_only() -> None:
    raw = {"schema": {"columns": [{"name": "a"}, {"name": "b"}]}, "recommendations": ["'a' x", "'b' y", "file z"]}
    assert selected(raw, ["b"]) == ([{"name": "b"}], ["'b' y", "file z"])
    assert selected(raw, None)[1] == ["'a' x", "'b' y", "file z"]


def test_shown_groups_describe_the_rows_shown() -> None:
    info = {"groups_total": 3, "groups_represented": 3, "allocation": {"a": 2, "b": 1, "c": 1}}
    assert shown_groups(info, ["a", "b"]) == {
        "groups_total": 3,
        "groups_represented": 2,
        "allocation": {"a": 1, "b": 1},
    }


def test_a_cut_sample_names_the_rest_and_the_next_offset() -> None:
    args = SampleIn(file_path="x.csv", strategy="stratified", stratify_column="g", sample_size=6, max_tokens=100)
    groups = ["a", "b", "c", "a", "b", "a"]
    cut = sample_cut(args, 100, 2, 6, groups, None)
    assert cut.reason == "max_tokens 100" and cut.left_out == "sampled rows 3-6 of 6; 1 groups: c"
    assert cut.next_call is not None and cut.next_call.tool == "stream_sample" and cut.next_call.args == {"offset": 2}
    none = sample_cut(args, 100, 0, 6, groups, 180)
    assert none.next_call is not None and none.next_call.args == {"max_tokens": 180, "offset": 0}


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


def test_a_profile_past_the_largest_budget_is_got_by_its_columns(
    profiled: tuple[dict[str, Any], engine.Source],
) -> None:
    raw, src = profiled
    year = next(c for c in raw["schema"]["columns"] if c["name"] == "year")
    wide = {**raw, "schema": {"columns": [{**year, "name": f"column_{i}"} for i in range(1500)]}}
    out = fit((wide, src), 20_000)
    assert out.context_tokens_used <= 20_000 and 0 < out.schema_.columns_omitted < 1500
    shown = len(out.schema_.columns) - 1
    assert out.cut is not None and out.cut.next_call is not None
    assert out.cut.next_call.args == {"columns": [f"column_{i}" for i in range(shown, shown + 50)]}
