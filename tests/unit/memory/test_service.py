"""app/memory/service.py (pure parts), without a server."""

from __future__ import annotations

import uuid
from typing import Any

from app.memory.service import plan_push


def _old(content_hash: str, index: int | None) -> dict[str, Any]:
    return {"id": uuid.uuid4(), "content_hash": content_hash, "chunk_index": index}


def test_a_new_text_inserts_each_chunk_once_and_skips_known_ones() -> None:
    plan = plan_push(["a", "b", "a", "c"], known={"c"}, old=[])
    assert plan.inserts == [(0, "a"), (1, "b")]
    assert (plan.kept, plan.rewrites, plan.removed, plan.skipped) == ([], [], [], 2)


def test_a_source_pushed_again_keeps_its_chunks_and_writes_over_the_leftovers_in_order() -> None:
    same, late, early = _old("b", 1), _old("x", 5), _old("y", 2)
    plan = plan_push(["n1", "b", "n2", "n3"], known={"b", "x", "y"}, old=[same, late, early])
    assert plan.kept == [(same["id"], 1)]
    # The leftovers are reused in their chunk order: index 2, then 5; the third new chunk is a new row.
    assert plan.rewrites == [(early["id"], 0, "n1"), (late["id"], 2, "n2")]
    assert plan.inserts == [(3, "n3")] and plan.removed == [] and plan.skipped == 1


def test_a_shorter_text_removes_what_is_left_over() -> None:
    first, second, third = _old("a", 0), _old("b", 1), _old("c", None)
    plan = plan_push(["a", "z"], known={"a", "b", "c"}, old=[first, second, third])
    assert plan.kept == [(first["id"], 0)]
    # A row without an index sorts as index 0, so it is the one written over.
    assert plan.rewrites == [(third["id"], 1, "z")] and plan.removed == [second["id"]] and plan.inserts == []
