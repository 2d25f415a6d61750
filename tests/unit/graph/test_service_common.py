"""app/graph/service_common.py: the words a graph search matches on, and the reference server's
"not found" for a missing entity."""

from __future__ import annotations

import pytest

from app.core.errors import NotFound
from app.graph.repository import EntityRow
from app.graph.service_common import not_found, query_words, require


def test_query_words_are_lowered_unique_in_order_and_capped() -> None:
    assert query_words("Ada LOVELACE and ada's Engine, engine!") == ["ada", "lovelace", "and", "s", "engine"]
    assert query_words("Größe café 東京 x_1") == ["größe", "café", "東京", "x_1"]  # unicode words, underscores kept
    assert query_words("  ,;:!  ") == []
    many = " ".join(f"w{i}" for i in range(50))
    assert query_words(many) == [f"w{i}" for i in range(32)]
    assert query_words(many, cap=3) == ["w0", "w1", "w2"]


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
