"""app/datasets/engine/profiling.py: profiles and samples show values as answers render them; a column's
semantic type, statistics and recommendations; the summary line of a column."""

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


def test_semantic_types() -> None:
    assert profiling.semantic_type("BIGINT", 10, 10) == "int64"
    assert profiling.semantic_type("DECIMAL(9,2)", 10, 10) == "float64"
    assert profiling.semantic_type("TIMESTAMP WITH TIME ZONE", 10, 10) == "datetime"
    assert profiling.semantic_type("BOOLEAN", 2, 10) == "bool"
    assert profiling.semantic_type("INTEGER[]", 2, 10) == "list"
    assert profiling.semantic_type("STRUCT(id BIGINT)", 2, 10) == "struct"
    assert profiling.semantic_type("VARCHAR", 3, 6) == "category"  # each value seen twice on average
    assert profiling.semantic_type("VARCHAR", 3, 5) == "string"
    assert profiling.semantic_type("VARCHAR", profiling.CATEGORY_MAX_DISTINCT + 1, 10**6) == "string"


def test_a_profile_of_a_messy_file(tmp_path: Path) -> None:
    roomy = small_engine_config(tmp_path / "roomy", memory_limit="512MB", timeout_s=60.0)
    path = roomy.roots[0] / "messy.csv"
    lines = [f"{i},{'north' if i % 2 else 'south'},${i},,{'yes' if i % 3 else 'Y'},7" for i in range(20)]
    path.write_text("id,region,price,empty,flag,same\n" + "\n".join(lines) + "\n")
    src = sources.make_source("messy", str(path), [path])
    prof = profiling.profile(roomy, src, sample_size=100, compute_stats=True, max_categories=5)
    columns = {c["name"]: c for c in prof["schema"]["columns"]}
    assert [columns[n]["type"] for n in ("id", "region", "price", "flag")] == [
        "int64",
        "category",
        "string",
        "category",
    ]
    assert columns["id"]["stats"]["min"] == 0 and columns["id"]["stats"]["max"] == 19
    assert columns["region"]["stats"]["top_values"] == [["north", 10], ["south", 10]]
    assert columns["empty"]["null_pct"] == 100.0
    assert prof["statistics"]["row_count"] == 20 and prof["statistics"]["column_count"] == 6
    advice = prof["recommendations"]
    assert "'empty' is 100% empty: filter or impute it" in advice
    assert "'same' holds one value: drop it" in advice
    assert "'price' holds numbers as text: strip currency signs, then CAST AS DOUBLE" in advice
    assert 0 < prof["statistics"]["quality_score"] < 1
    quick = profiling.profile(roomy, src, sample_size=5, compute_stats=False, max_categories=5)
    assert all("stats" not in c for c in quick["schema"]["columns"])
    assert quick["statistics"]["row_count"] == 20


def test_a_summary_line_of_a_column() -> None:
    header = profiling.summary_header()
    assert header == "name,type,null_pct,unique_count,sample_values,stats"
    number = {"name": "n", "type": "int64", "null_pct": 12.5, "unique_count": 3, "sample_values": [1, 2]}
    assert profiling.summary_line({**number, "stats": {"min": 1, "max": 9}}) == "n,int64,12.5,3,,1..9"
    assert profiling.summary_line(number) == "n,int64,12.5,3,1 | 2,"
    day = {"name": "d", "type": "datetime", "null_pct": 0.0, "unique_count": 2, "sample_values": []}
    stats = {"min": "2024-01-01T00:00:00", "max": "2024-01-02T06:39:00"}
    assert profiling.summary_line({**day, "stats": stats}) == "d,datetime,0,2,,2024-01-01..2024-01-02T06:39"
    top = [["north", 48], ["east", 39], ["west", 2], ["south", 1]]
    region = {"name": "r", "type": "category", "null_pct": 0, "unique_count": 9, "sample_values": ["north"]}
    line = profiling.summary_line({**region, "stats": {"top_values": top, "other_values": 5, "other_rows": 7}})
    assert line == "r,category,0,9,,north 48; east 39; west 2 (+6 more: 8 rows)"


def test_a_stratified_sample_represents_every_group(tmp_path: Path) -> None:
    # 7 rows left after one each: 6.3, 0.63 and 0.07 of them; the one left over goes to the largest remainder.
    assert profiling._allocate([("a", 90), ("b", 9), ("c", 1)], 10, 100) == {"a": 7, "b": 2, "c": 1}
    assert profiling._allocate([("a", 2), ("b", 2)], 10, 4) == {"a": 2, "b": 2}  # no more than a group holds
    roomy = small_engine_config(tmp_path / "roomy", memory_limit="512MB", timeout_s=60.0)
    path = roomy.roots[0] / "groups.csv"
    path.write_text("g,v\n" + "".join(f"{'a' if i < 18 else 'b'},{i}\n" for i in range(20)))
    src = sources.make_source("groups", str(path), [path])
    sampled = profiling.sample(roomy, src, strategy="stratified", size=5, columns=None, stratify_column="g", seed=3)
    assert sampled["info"]["allocation"] == {"a": 4, "b": 1} and sampled["info"]["groups_total"] == 2
    assert sorted(r["g"] for r in sampled["rows"]) == ["a", "a", "a", "a", "b"]
    again = profiling.sample(roomy, src, strategy="stratified", size=5, columns=None, stratify_column="g", seed=3)
    assert again["rows"] == sampled["rows"]  # seeded: the same rows again


def test_nested_columns_get_their_inner_fields_and_dates_their_formats(cfg: databases.EngineConfig) -> None:
    path = cfg.roots[0] / "events.ndjson"
    lines = [
        f'{{"id": {i}, "customer": {{"id": {i % 3}, "city": "東京"}}, "tags": ["a", "b"], "day": "{day}"}}'
        for i, day in enumerate(["2025-01-02", "02/01/2025", "2025-01-03", "13/01/2025"])
    ]
    path.write_text("\n".join(lines) + "\n")
    src = sources.make_source("events", str(path), [path])
    prof = profiling.profile(cfg, src, sample_size=100, compute_stats=True, max_categories=5)
    cols = {c["name"]: c for c in prof["schema"]["columns"]}
    assert cols["customer"]["type"] == "struct" and cols["tags"]["type"] == "list"
    assert [f["path"] for f in cols["customer"]["fields"]] == ["customer.id", "customer.city"]
    assert cols["customer"]["fields"][0]["stats"]["max"] == 2
    assert cols["tags"]["fields"][0]["path"] == "tags[]" and cols["tags"]["fields"][0]["unique_count"] == 2
    assert cols["day"]["date_formats"] == {"%Y-%m-%d": 0.5, "%d/%m/%Y": 0.5}
    assert any(r.startswith("'day' mixes 2 date formats") for r in prof["recommendations"])
    lines_out = profiling.summary_lines(cols["customer"])
    assert lines_out[0] == "customer,struct,0,3,,2 inner fields"
    assert lines_out[1].startswith("customer.id,int64,0,") and lines_out[1].endswith(",0..2")


def test_a_wide_struct_says_how_many_inner_fields_it_leaves_undescribed(cfg: databases.EngineConfig) -> None:
    path = cfg.roots[0] / "wide.ndjson"
    inner = ", ".join(f'"f{i}": {i}' for i in range(30))
    path.write_text(f'{{"w": {{{inner}}}}}\n{{"w": {{{inner}}}}}\n')
    src = sources.make_source("wide", str(path), [path])
    prof = profiling.profile(cfg, src, sample_size=100, compute_stats=True, max_categories=5)
    wide = prof["schema"]["columns"][0]
    assert [f["path"] for f in wide["fields"]] == [f"w.f{i}" for i in range(24)]
    assert wide["fields_omitted"] == 6
    assert profiling.summary_lines(wide)[0].endswith(",24 inner fields (+6 not described)")
