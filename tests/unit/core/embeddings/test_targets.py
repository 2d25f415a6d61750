"""app/core/embeddings/targets.py: the embedding queue's view of a family's `EmbeddedRows`."""

from __future__ import annotations

import uuid
from typing import Any

from app.core.embeddings.targets import EmbeddingTarget, embedding_target
from app.core.embeddings.vectors import EmbeddedRows, vector_param


def snapshot(name: str, kind: str) -> str:
    return f"{name} ({kind})"


class FakeResult:
    def mappings(self) -> FakeResult:
        return self

    def all(self) -> list[dict[str, Any]]:
        return [{"ref": 7, "name": "Ada", "kind": "person"}, {"ref": 9, "name": "Cairn", "kind": "project"}]


class FakeSession:
    """Records the statements a target runs."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def execute(self, statement: Any, params: Any = None) -> FakeResult:
        self.calls.append((str(statement), params))
        return FakeResult()


async def test_a_target_stores_one_statement_per_batch_with_typed_distinct_keys() -> None:
    rows = EmbeddedRows("notes", "notes", "note_vectors", text="body", key_type="uuid", owner="note_id")
    target = embedding_target(rows)
    assert isinstance(target, EmbeddingTarget) and target.name == "notes"
    a, b = uuid.uuid4(), uuid.uuid4()
    session = FakeSession()
    await target.store(session, "m", [(str(a), [1.0, 2.0]), (str(b), [3.0, 4.0]), (str(a), [5.0, 6.0])])  # type: ignore[arg-type]
    assert len(session.calls) == 1
    sql, params = session.calls[0]
    assert sql.startswith("INSERT INTO note_vectors")
    assert params == {"model": "m", "owners": [a, b], "vectors": [vector_param([5.0, 6.0]), vector_param([3.0, 4.0])]}
    await target.store(session, "m", [])  # type: ignore[arg-type]
    assert len(session.calls) == 1  # nothing to store, no statement


async def test_a_target_composes_texts_from_named_columns() -> None:
    rows = EmbeddedRows("people", "people", "people_vectors", columns=("name", "kind"), compose=snapshot)
    session = FakeSession()
    texts = await embedding_target(rows).texts(session, ["7", "9"])  # type: ignore[arg-type]
    assert texts == {"7": "Ada (person)", "9": "Cairn (project)"}
    assert session.calls[0][1] == {"keys": [7, 9]}
