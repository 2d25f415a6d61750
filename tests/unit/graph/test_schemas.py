"""app/graph/schemas.py: entity statuses are English in replies, and the seed's Spanish ones are accepted."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.graph.schemas import EntityIn, SetEntityStatusIn, english_status


def test_the_seeds_spanish_statuses_read_as_english_ones() -> None:
    assert english_status("activo") == "active" and english_status("Archivado") == "archived"
    assert english_status("archived") == "archived" and english_status("draft") == "draft"
    assert EntityIn(name="Ada").status == "active"
    assert EntityIn(name="Ada", status=" ARCHIVADO ").status == "archived"
    assert SetEntityStatusIn(entity_name="Ada", status="activo").status == "active"
    assert SetEntityStatusIn(entity_name="Ada", status="on hold").status == "on hold"
    with pytest.raises(ValidationError):
        SetEntityStatusIn(entity_name="Ada", status=" ")
