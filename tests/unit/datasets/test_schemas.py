"""app/datasets/schemas.py: the query type an engine runs when none is given, the compression a
filename names, and the fields a reply leaves out when they hold nothing (each costs tokens)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.datasets.schemas import ColumnProfile, ExportIn, ProfileSchema, QueryIn, Visualization

QID = "q_0123456789abcdef"


@pytest.mark.parametrize(
    ("given", "kind"),
    [
        ({}, "sql"),
        ({"engine": "duckdb"}, "sql"),
        ({"engine": "polars"}, "polars_expr"),
        ({"engine": "pandas", "query_type": None}, "python"),
        ({"engine": "polars", "query_type": "sql"}, "sql"),  # a given type is kept
    ],
)
def test_the_query_type_follows_the_engine_when_none_is_given(given: dict[str, Any], kind: str) -> None:
    assert QueryIn.model_validate({"query": "x", **given}).query_type == kind


def test_a_query_is_strict_about_its_arguments() -> None:
    with pytest.raises(ValidationError):
        QueryIn.model_validate({"query": "x", "colour": "red"})
    with pytest.raises(ValidationError):
        QueryIn.model_validate({"query": ""})
    with pytest.raises(ValidationError):
        QueryIn.model_validate({"query": "x", "engine": "spark"})


@pytest.mark.parametrize(
    ("given", "compression"),
    [
        ({}, "snappy"),
        ({"filename": "out.csv.gz", "format": "csv"}, "gzip"),
        ({"filename": "OUT.JSON.ZST", "format": "json"}, "zstd"),
        ({"filename": "out.csv", "format": "csv", "compression": None}, "snappy"),
        ({"filename": "out.csv.gz", "format": "csv", "compression": "none"}, "none"),  # a given one is kept
    ],
)
def test_the_compression_follows_the_filename_when_none_is_given(given: dict[str, Any], compression: str) -> None:
    assert ExportIn.model_validate({"query_id": QID, "destination": "exports", **given}).compression == compression


def test_an_export_names_a_stored_result_and_a_plain_file() -> None:
    with pytest.raises(ValidationError):
        ExportIn.model_validate({"query_id": "q_nothex", "destination": "exports"})
    with pytest.raises(ValidationError):
        ExportIn.model_validate({"query_id": QID, "destination": "exports", "filename": "../up.csv"})


def test_empty_fields_are_left_out_of_the_reply() -> None:
    column = ColumnProfile(
        name="a", type="int64", null_pct=0.0, unique_count=3, sample_values=[1], duckdb_type="BIGINT"
    )
    assert "stats" not in column.model_dump()
    assert column.model_copy(update={"stats": {"min": 1}}).model_dump()["stats"] == {"min": 1}
    assert "columns_omitted" not in ProfileSchema(columns=["name,type"]).model_dump()
    assert ProfileSchema(columns=["name,type"], columns_omitted=2).model_dump()["columns_omitted"] == 2
    assert Visualization(type="bar").model_dump() == {"type": "bar"}
    assert Visualization(type="bar", points=0, notes=[]).model_dump() == {"type": "bar", "points": 0, "notes": []}
