"""app/memory/schemas_thoughts.py: list_thoughts' `archived` alias and bounds, and hits that leave out
what they do not have."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.memory.schemas_thoughts import ListThoughtsIn, ThoughtHit


def test_archived_is_an_alias_of_include_archived() -> None:
    assert ListThoughtsIn.model_validate({"archived": True}).include_archived is True
    assert ListThoughtsIn.model_validate({}).include_archived is False
    with pytest.raises(ValidationError, match="differ"):
        ListThoughtsIn.model_validate({"archived": True, "include_archived": False})


@pytest.mark.parametrize("bad", [{"limit": 0}, {"limit": 101}, {"offset": -1}, {"days": 0}, {"days": 36501}])
def test_list_bounds(bad: dict[str, int]) -> None:
    with pytest.raises(ValidationError):
        ListThoughtsIn.model_validate(bad)


def test_a_hit_leaves_out_what_it_does_not_have() -> None:
    bare = ThoughtHit(id="1", content="c", similarity=0.5, project="p", created_at="2026-01-01")
    assert bare.model_dump() == {
        "id": "1",
        "content": "c",
        "similarity": 0.5,
        "project": "p",
        "created_at": "2026-01-01",
    }
    full = ThoughtHit(
        id="1",
        content="c",
        truncated=True,
        similarity=0.5,
        project="p",
        metadata={"type": "idea"},
        created_at="2026-01-01",
        signals={},
    )
    assert {"truncated", "metadata", "signals"} <= full.model_dump().keys()
