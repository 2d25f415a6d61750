"""app/graph/service_common.py: the reference server's "not found" for a missing entity."""

from __future__ import annotations

import pytest

from app.core.errors import NotFound
from app.graph.repository import EntityRow
from app.graph.service_common import not_found, require


def test_not_found_uses_the_reference_servers_wording() -> None:
    err = not_found("Ada")
    assert isinstance(err, NotFound) and err.code == 4002
    assert err.message == "Entity with name Ada not found" and err.suggestions


def test_require_gives_rows_by_name_or_the_first_missing_name() -> None:
    rows = [EntityRow(1, "Ada", "person", "active"), EntityRow(2, "Engine", "machine", "active")]
    assert require(rows, ["Engine", "Ada"]) == {"Ada": rows[0], "Engine": rows[1]}
    assert require(rows, []) == {"Ada": rows[0], "Engine": rows[1]}
    with pytest.raises(NotFound, match="Entity with name Babbage not found"):
        require(rows, ["Ada", "Babbage", "Zuse"])
