"""app/core/embeddings/knn.py: the one k-NN statement, its literal model and index expression, the scan policy."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pgvector import Vector

from app.core.embeddings import knn
from app.core.embeddings.knn import (
    KnnQuery,
    distance_sql,
    ef_search_for,
    model_literal,
    nearest,
    nearest_rows,
    similarity_sql,
)
from app.core.embeddings.vectors import EmbeddedRows, vector_param
from app.core.repository import Repository

APP = Path(__file__).resolve().parents[4] / "app"
PARAM = re.compile(r"(?<![:\w]):(\w+)")
NOTES = EmbeddedRows("notes", "notes", "note_vectors", text="body", key_type="uuid", owner="note_id")
INDEX = re.compile(r"USING hnsw \(\((embedding::vector\((\d+)\))\) vector_cosine_ops\) WHERE model = '([^']+)'")


def squash(sql: str) -> str:
    return " ".join(sql.split())


def test_the_model_is_a_quoted_literal() -> None:
    assert model_literal("all-MiniLM-L6-v2") == "'all-MiniLM-L6-v2'"
    assert model_literal("o'brien") == "'o''brien'"
    assert model_literal("x'; DROP TABLE notes; --") == "'x''; DROP TABLE notes; --'"
    assert model_literal("back\\slash") == "'back\\slash'"  # standard_conforming_strings: taken as it is
    with pytest.raises(ValueError, match="NUL"):
        model_literal("a\x00b")


def test_the_statement_orders_by_the_index_expression_and_names_the_model_as_a_literal() -> None:
    query = KnnQuery(
        NOTES,
        "all-MiniLM-L6-v2",
        [0.5] * 384,
        10,
        alias="n",
        where="n.project_id = :pid AND NOT n.archived",
        params={"pid": 7},
        columns=("n.title", "n.body AS text"),
    )
    distance = "(e.embedding::vector(384)) <=> CAST(:knn_q AS vector(384))"
    assert squash(query.sql) == (
        f"SELECT e.note_id AS owner, 1 - ({distance}) AS cosine, n.title, n.body AS text "
        "FROM note_vectors e JOIN notes n ON n.id = e.note_id "
        "WHERE e.model = 'all-MiniLM-L6-v2' AND e.dim = 384 AND (n.project_id = :pid AND NOT n.archived) "
        f"ORDER BY {distance} LIMIT :knn_k"
    )
    assert query.dim == 384 and distance_sql(384) == distance
    assert set(PARAM.findall(query.sql)) == {"pid", "knn_q", "knn_k"}  # the model is not a parameter


def test_every_partial_hnsw_index_is_on_the_expression_the_statement_orders_by() -> None:
    """Each family's index (its migration) is `(embedding::vector(384))` for one model: the builder
    writes that cast and that model, character for character."""
    found = []
    for path in sorted(APP.glob("*/migrations/*.py")):
        source = path.read_text(encoding="utf-8").replace("{MODEL}", "all-MiniLM-L6-v2")
        found += [(path.parent.parent.name, m.groups()) for m in INDEX.finditer(source)]
    assert sorted({family for family, _ in found}) == ["analysis", "graph", "memory"]
    for _, (expression, dim, model) in found:
        sql = KnnQuery(NOTES, model, [1.0] * int(dim), 5).sql
        assert f"ORDER BY (e.{expression}) <=> CAST(:knn_q AS vector({dim})) LIMIT" in sql
        assert f"WHERE e.model = {model_literal(model)} AND" in sql


def test_parameters_bind_the_query_vector_in_binary_form_with_the_familys_own() -> None:
    query = KnnQuery(NOTES, "m", [0.25, -1.0, 2.0], 3, where="t.kind = :kind", params={"kind": "a"})
    assert query.parameters == {"kind": "a", "knn_q": vector_param([0.25, -1.0, 2.0]), "knn_k": 3}
    assert Vector.from_binary(query.parameters["knn_q"]).to_list() == [0.25, -1.0, 2.0]
    assert knn.query_params(None) == {"knn_q": None}
    assert similarity_sql(3, "v") == "1 - ((v.embedding::vector(3)) <=> CAST(:knn_q AS vector(3)))"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"alias": "e"}, "vectors' alias"),
        ({"alias": "n; DROP TABLE x"}, "not a plain SQL identifier"),
        ({"vector": []}, "not a vector dimension"),
        ({"vector": [0.0] * 16001}, "not a vector dimension"),
        ({"k": -1}, "k must be a count"),
        ({"k": True}, "k must be a count"),
        ({"model": "a\x00"}, "NUL"),
        ({"where": "TRUE; DELETE FROM notes"}, "not a single SQL condition"),
        ({"where": "TRUE -- x"}, "not a single SQL condition"),
        ({"where": " "}, "not a single SQL condition"),
        ({"columns": ("t.a /* x */",)}, "not a single SQL condition"),
        ({"params": {"knn_q": b""}}, "the k-NN statement's own"),
        ({"params": {"knn_k": 1}}, "the k-NN statement's own"),
    ],
)
def test_a_query_refuses_what_would_change_the_statement(change: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {"rows": NOTES, "model": "m", "vector": [1.0, 0.0], "k": 5}
    with pytest.raises(ValueError, match=message):
        KnnQuery(**{**base, **change})
    with pytest.raises(ValueError, match="not a vector dimension"):
        distance_sql(0)


def test_ef_search_is_the_setting_raised_to_k_within_pgvectors_range() -> None:
    assert ef_search_for(10) == knn.EF_SEARCH_DEFAULT == 40
    assert ef_search_for(10, 100) == 100
    assert ef_search_for(250, 100) == 250
    assert ef_search_for(5000, 100) == knn.EF_SEARCH_MAX == 1000
    assert ef_search_for(0, 0) == 1
    assert ef_search_for(60) == 60


class FakeResult:
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.found = rows

    def mappings(self) -> FakeResult:
        return self

    def all(self) -> list[dict[str, Any]]:
        return self.found


class FakeSession:
    """Records the statements run and answers the k-NN statement with rows in relaxed order."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.found = rows
        self.calls: list[tuple[str, Any]] = []

    async def execute(self, statement: Any, params: Any = None) -> FakeResult:
        self.calls.append((str(statement), params))
        return FakeResult(self.found if "ORDER BY" in str(statement) else [])


RELAXED = [
    {"owner": "b", "cosine": 0.5, "title": "B"},
    {"owner": "a", "cosine": 0.9, "title": "A"},
    {"owner": "c", "cosine": 0.5, "title": "C"},
    {"owner": "d", "cosine": -0.1, "title": "D"},
]


async def test_a_search_sets_the_scan_policy_first_and_returns_rows_best_first() -> None:
    session = FakeSession(RELAXED)
    query = KnnQuery(NOTES, "m", [1.0, 0.0], 4, columns=("t.title",))
    rows = await nearest_rows(Repository(session), query, ef_search=100)  # type: ignore[arg-type]
    assert [r["owner"] for r in rows] == ["a", "b", "c", "d"]  # ties keep the scan's order
    (policy, settings), (sql, params) = session.calls
    assert squash(policy) == (
        "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), set_config('hnsw.ef_search', :ef, true)"
    )
    assert settings == {"ef": "100"}
    assert sql == query.sql and params == query.parameters
    pairs = await nearest(Repository(FakeSession(RELAXED)), query)  # type: ignore[arg-type]
    assert pairs == [("a", 0.9), ("b", 0.5), ("c", 0.5), ("d", -0.1)]


async def test_an_exact_search_turns_index_scans_off_for_its_statement_only() -> None:
    session = FakeSession(RELAXED)
    query = KnnQuery(NOTES, "m", [1.0, 0.0], 2000)
    await nearest(Repository(session), query, ef_search=100, exact=True)  # type: ignore[arg-type]
    (policy, settings), (sql, _), (after, _) = session.calls
    assert policy.endswith("set_config('hnsw.ef_search', :ef, true), set_config('enable_indexscan', 'off', true)")
    assert settings == {"ef": "1000"}
    assert sql == query.sql
    assert after == "SELECT set_config('enable_indexscan', 'on', true)"
