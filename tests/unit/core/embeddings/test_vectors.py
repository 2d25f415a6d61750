"""app/core/embeddings/vectors.py: the declaration of what a family embeds, and the binary vector parameter."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import numpy as np
import pytest
from pgvector import Vector

from app.core.db import encode_vector
from app.core.embeddings.targets import EmbeddingTarget, embedding_target
from app.core.embeddings.vectors import EmbeddedRows, identifier, vector_param


def snapshot(name: str, kind: str) -> str:
    return f"{name} ({kind})"


def test_identifiers_are_plain_lower_case_names() -> None:
    for ok in ("memories", "graph_embeddings", "owner_id", "_x1", "a" * 63):
        assert identifier(ok) == ok
    for bad in ("", "Memories", "1st", "t.id", "a-b", "x y", 'x"', "x; DROP TABLE y", "a" * 64, "é"):
        with pytest.raises(ValueError, match="not a plain SQL identifier"):
            identifier(bad)


@pytest.mark.parametrize(
    "field",
    ["target", "table", "vectors", "key", "owner"],
)
def test_a_declaration_refuses_a_name_that_is_not_an_identifier(field: str) -> None:
    base: dict[str, Any] = {"target": "t", "table": "rows", "vectors": "rows_vec", "text": "body"}
    with pytest.raises(ValueError, match="not a plain SQL identifier"):
        EmbeddedRows(**{**base, field: "rows; DROP TABLE x"})
    with pytest.raises(ValueError, match="not a plain SQL identifier"):
        EmbeddedRows("t", "rows", "rows_vec", columns=("name", "Kind"), compose=snapshot)


def test_a_declaration_names_its_text_once() -> None:
    with pytest.raises(ValueError, match="either `text`, or `columns` and `compose`"):
        EmbeddedRows("t", "rows", "rows_vec")
    with pytest.raises(ValueError, match="either `text`, or `columns` and `compose`"):
        EmbeddedRows("t", "rows", "rows_vec", text="body", columns=("name",), compose=snapshot)
    with pytest.raises(ValueError, match="either `text`, or `columns` and `compose`"):
        EmbeddedRows("t", "rows", "rows_vec", compose=snapshot)
    with pytest.raises(ValueError, match="either `text`, or `columns` and `compose`"):
        EmbeddedRows("t", "rows", "rows_vec", text="body", columns=("name",))
    with pytest.raises(ValueError, match="may not be called 'ref'"):
        EmbeddedRows("t", "rows", "rows_vec", columns=("ref", "kind"), compose=snapshot)
    with pytest.raises(ValueError, match="key_type"):
        EmbeddedRows("t", "rows", "rows_vec", text="body", key_type="text")  # type: ignore[arg-type]


def test_text_and_liveness_fragments_are_single_parameterless_expressions() -> None:
    ok = EmbeddedRows("t", "rows", "rows_vec", text="t.title || ' ' || t.body::text", live="t.expires_at > now()")
    assert ok.text_column is None
    assert EmbeddedRows("t", "rows", "rows_vec", text="body").text_column == "body"
    for bad in ("body; DELETE FROM rows", "body -- x", "body /* x */", "t.body = :value", " "):
        with pytest.raises(ValueError, match="not a single parameterless SQL expression"):
            EmbeddedRows("t", "rows", "rows_vec", text=bad)
        with pytest.raises(ValueError, match="not a single parameterless SQL expression"):
            EmbeddedRows("t", "rows", "rows_vec", text="body", live=bad)


def test_vector_param_is_pgvectors_binary_form_and_round_trips_as_float4() -> None:
    values = [0.1, -2.5, 3.0e-8, 1.0 / 3.0, 0.0, 123456.789]
    packed = vector_param(values)
    assert packed == Vector(values).to_binary()
    assert struct.unpack_from(">HH", packed) == (len(values), 0)
    back = Vector.from_binary(packed).to_list()
    assert back == [float(np.float32(v)) for v in values]  # exact float4, not 7 rounded digits
    assert vector_param([]) == Vector([]).to_binary()


def test_the_codec_sends_bound_bytes_as_they_are_and_converts_other_values() -> None:
    values = [0.25, -1.0, 8.0]
    packed = vector_param(values)
    assert encode_vector(packed) is packed
    assert encode_vector(values) == packed
    assert encode_vector(Vector(values)) == packed
    assert encode_vector(np.array(values)) == packed


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
