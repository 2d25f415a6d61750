"""app/analysis/service_ingest.py (pure parts), without a server."""

from __future__ import annotations

import pytest

from app.analysis.catalog import load_catalog
from app.analysis.config import DEMO_REGISTRY
from app.analysis.service_ingest import project_fields, upstream_params
from app.analysis.upstream import Shaper, dig
from app.core.errors import InvalidInput


def test_flatten_projection_and_filters() -> None:
    row = Shaper()({"id": 1, "author": {"id": 7, "name": "A"}, "_links": {"self": "x"}, "tags": [1]})
    assert row == {"id": 1, "author_id": 7, "author_name": "A", "tags": [1]}
    assert project_fields(row, ["author_name"], {"id"}) == {"id": 1, "author_id": 7, "author_name": "A"}
    assert dig({"_embedded": {"books": [1]}}, "_embedded.books") == [1] and dig([1], "") == [1]
    model = load_catalog(DEMO_REGISTRY).model("book").cfg
    assert upstream_params(model, {"status": "done", "min_rating": 3, "genre": None}) == {
        "status": "done",
        "min_rating": 3,
    }
    with pytest.raises(InvalidInput):
        upstream_params(model, {"colour": "red"})
