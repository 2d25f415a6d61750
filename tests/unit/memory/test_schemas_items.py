"""app/memory/schemas_items.py: get_memory's chunk window and the fields a memory leaves out when unset."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from app.memory.schemas_items import GetMemoryIn, ListMemoriesIn, MemoryChunk, MemoryItem


def test_the_chunk_window_is_bounded() -> None:
    key = uuid.uuid4()
    assert (GetMemoryIn(id=key).chunk_offset, GetMemoryIn(id=key).chunk_limit) == (0, 20)
    assert GetMemoryIn(id=key, chunk_limit=0).chunk_limit == 0  # no chunks listed
    for bad in ({"chunk_offset": -1}, {"chunk_limit": 101}, {"chunk_limit": -1}):
        with pytest.raises(ValidationError):
            GetMemoryIn.model_validate({"id": str(key), **bad})
    with pytest.raises(ValidationError):
        GetMemoryIn.model_validate({"id": "not-a-uuid"})


def test_a_memory_leaves_out_its_document_fields_when_it_has_none() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    common = {
        "id": "m1",
        "kind": "thought",
        "memory_type": "note",
        "project": "p",
        "collection": "c",
        "content": "x",
        "tags": [],
        "metadata": {},
        "archived": False,
        "created_at": now,
        "updated_at": now,
    }
    thought = MemoryItem.model_validate(common).model_dump()
    assert not {"source_uri", "document_id", "chunk_index"} & thought.keys()
    chunk = MemoryItem.model_validate({**common, "kind": "chunk", "document_id": "d", "chunk_index": 0}).model_dump()
    assert chunk["document_id"] == "d" and chunk["chunk_index"] == 0  # 0 is a value, not absent
    assert "chunk_index" not in MemoryChunk(id="c", content="x", vectors=[]).model_dump()


def test_a_listing_takes_known_kinds_types_and_bounded_pages() -> None:
    got = ListMemoriesIn.model_validate({"project": "p", "kind": ["chunk", "summary"], "tags": [" a "], "source": "x/"})
    assert got.kind == ["chunk", "summary"] and got.tags == ["a"] and (got.limit, got.offset) == (25, 0)
    for bad in (
        {"kind": ["note"]},
        {"memory_type": "daily"},
        {"limit": 0},
        {"limit": 101},
        {"offset": -1},
        {"project": "no/such"},
        {"source": ""},
        {"colour": "red"},
    ):
        with pytest.raises(ValidationError):
            ListMemoriesIn.model_validate(bad)
