"""app/features.py: the one list of feature families, and the enabled subset in that order."""

from __future__ import annotations

import pytest

from app import analysis, datasets, graph, memory
from app.features import FEATURES, enabled


def test_every_family_is_listed_once_in_its_order() -> None:
    assert [f.name for f in FEATURES] == ["memory", "graph", "analysis", "datasets"]
    assert FEATURES == (memory.FEATURE, graph.FEATURE, analysis.FEATURE, datasets.FEATURE)
    assert all(f.operations.feature == f.name and f.operations.operations for f in FEATURES)


def test_enabled_keeps_the_listing_order_whatever_the_order_asked() -> None:
    assert enabled(["all"]) == list(FEATURES)
    assert [f.name for f in enabled(["datasets", "memory"])] == ["memory", "datasets"]
    assert enabled([]) == []
    with pytest.raises(ValueError, match="unknown features"):
        enabled(["memory", "weather"])
