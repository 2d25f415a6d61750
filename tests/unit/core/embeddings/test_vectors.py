"""app/core/embeddings/vectors.py: the declaration of what a family embeds, and the binary vector parameter."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from pgvector import SparseVector, Vector

from app.core.db import encode_sparse_vector, encode_vector
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


def test_the_sparse_codec_sends_pgvectors_binary_form() -> None:
    sparse = SparseVector({0: 1.5, 41: -2.0}, 100)
    assert encode_sparse_vector(sparse) == sparse.to_binary()
    assert encode_sparse_vector([1.5, 0.0, 2.0]) == SparseVector({0: 1.5, 2: 2.0}, 3).to_binary()
    assert SparseVector.from_binary(encode_sparse_vector(sparse)) == sparse
