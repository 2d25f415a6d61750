"""app/datasets/schemas_cache.py: fields without a value are left out of the replies (each costs
tokens), and the estimate takes only the query types it can price."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.datasets.schemas_cache import CacheEntryOut, EstimateIn


def test_an_entry_without_rows_leaves_the_field_out() -> None:
    entry = CacheEntryOut(name="profile a.csv", kind="profile", bytes=10, age_s=1, expires_in_s=9, hits=0)
    assert "rows" not in entry.model_dump(mode="json")
    assert entry.model_copy(update={"rows": 3}).model_dump(mode="json")["rows"] == 3


def test_the_python_engine_is_not_priced() -> None:
    assert EstimateIn(query="SELECT 1").query_type == "sql"
    with pytest.raises(ValidationError):
        EstimateIn.model_validate({"query": "x = 1", "query_type": "python"})
