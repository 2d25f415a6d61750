"""app/core/embeddings/repository.py: the statements made from an `EmbeddedRows` declaration."""

from __future__ import annotations

import re
from typing import Any, cast

import pytest

from app.core.embeddings.repository import QUEUED_TARGET, EmbeddingQueueRepository, vector_statements
from app.core.embeddings.vectors import EmbeddedRows

PARAM = re.compile(r"(?<![:\w]):(\w+)")
LIVE = "t.expires_at IS NULL OR t.expires_at > now()"


def squash(sql: str) -> str:
    return " ".join(sql.split())


def composed(name: str, kind: str, notes: str) -> str:
    return f"{name} ({kind}): {notes}"


def test_texts_read_the_column_or_expression_or_the_composed_columns() -> None:
    plain = vector_statements(EmbeddedRows("m", "memories", "memory_vectors", text="content", key_type="uuid"))
    assert squash(plain.texts) == (
        "SELECT t.id AS ref, t.content AS text FROM memories t WHERE t.id = ANY(CAST(:keys AS uuid[]))"
    )
    live = vector_statements(EmbeddedRows("f", "findings", "finding_vectors", text="finding", live=LIVE))
    assert squash(live.texts) == (
        f"SELECT t.id AS ref, t.finding AS text FROM findings t WHERE t.id = ANY(CAST(:keys AS bigint[])) AND ({LIVE})"
    )
    expression = vector_statements(EmbeddedRows("d", "docs", "doc_vectors", text="t.title || ' ' || t.body"))
    assert "(t.title || ' ' || t.body) AS text" in expression.texts
    rows = EmbeddedRows("e", "entities", "entity_vectors", columns=("name", "kind", "notes"), compose=composed)
    assert squash(vector_statements(rows).texts) == (
        "SELECT t.id AS ref, t.name, t.kind, t.notes FROM entities t WHERE t.id = ANY(CAST(:keys AS bigint[]))"
    )


def test_store_is_one_ordered_upsert_that_skips_deleted_owners() -> None:
    rows = EmbeddedRows("m", "memories", "memory_vectors", text="content", key_type="uuid", owner="memory_id")
    sql = squash(vector_statements(rows).store)
    assert sql == (
        "INSERT INTO memory_vectors (memory_id, model, dim, embedding) "
        "SELECT u.owner, :model, vector_dims(u.embedding), u.embedding "
        "FROM unnest(CAST(:owners AS uuid[]), CAST(:vectors AS vector[])) AS u(owner, embedding) "
        "JOIN memories t ON t.id = u.owner ORDER BY u.owner FOR KEY SHARE OF t "
        "ON CONFLICT (memory_id, model) DO UPDATE SET embedding = EXCLUDED.embedding, dim = EXCLUDED.dim, "
        "created_at = now()"
    )
    unstamped = vector_statements(EmbeddedRows("f", "findings", "finding_vectors", text="finding", stamped=False))
    assert squash(unstamped.store).endswith("SET embedding = EXCLUDED.embedding, dim = EXCLUDED.dim")
    assert "CAST(:owners AS bigint[])" in unstamped.store


def test_missing_lists_live_rows_without_a_vector_that_are_not_queued() -> None:
    rows = EmbeddedRows("f", "findings", "finding_vectors", text="finding", live=LIVE)
    assert squash(vector_statements(rows).missing) == (
        f"SELECT t.id AS ref FROM findings t WHERE TRUE AND ({LIVE}) "
        "AND NOT EXISTS (SELECT 1 FROM finding_vectors v WHERE v.owner_id = t.id AND v.model = :model) "
        "AND NOT EXISTS (SELECT 1 FROM embedding_queue q WHERE q.target = :target AND q.ref = t.id::text "
        "AND q.model = :model) ORDER BY t.id LIMIT :limit"
    )


def test_values_are_bound_parameters_only() -> None:
    rows = EmbeddedRows("f", "findings", "finding_vectors", text="t.finding::text", live=LIVE)
    statements = vector_statements(rows)
    assert set(PARAM.findall(statements.texts)) == {"keys"}
    assert set(PARAM.findall(statements.store)) == {"model", "owners", "vectors"}
    assert set(PARAM.findall(statements.missing)) == {"model", "target", "limit"}
    assert vector_statements(rows) is statements  # made once per declaration


class Recorded:
    """A session that records the statement it is given and answers with no rows."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def execute(self, statement: Any, params: Any = None) -> Recorded:
        self.calls.append((squash(str(statement)), params))
        return self

    def mappings(self) -> Recorded:
        return self

    def all(self) -> list[dict[str, Any]]:
        return [{"model": "m", "n": 2}]


async def test_queued_counts_select_the_refs_with_the_familys_own_query() -> None:
    session = Recorded()
    refs = "SELECT m.id::text FROM memories m WHERE m.document_id = :d"
    counts = await EmbeddingQueueRepository(cast(Any, session)).queued_by_model("m", refs, {"d": 7})
    assert counts == {"m": 2}
    assert session.calls == [
        (
            f"SELECT q.model, count(*) AS n FROM embedding_queue q WHERE q.target = :{QUEUED_TARGET} "
            f"AND q.ref IN ({refs}) GROUP BY q.model",
            {"d": 7, QUEUED_TARGET: "m"},
        )
    ]


@pytest.mark.parametrize(
    ("refs", "params"),
    [("SELECT 1; DELETE FROM memories", {}), ("SELECT '1' -- x", {}), ("SELECT :queued_target", {QUEUED_TARGET: 1})],
)
async def test_queued_counts_refuse_a_query_that_is_not_one_statement_of_its_own(
    refs: str, params: dict[str, Any]
) -> None:
    session = Recorded()
    with pytest.raises(ValueError):
        await EmbeddingQueueRepository(cast(Any, session)).queued_by_model("m", refs, params)
    assert session.calls == []
