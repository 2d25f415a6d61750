"""app/core/feature.py: which features CAIRN_FEATURES enables, and the descriptor's own check."""

from __future__ import annotations

import pytest

from app.core.feature import Feature, resolve, select
from app.core.registry import OperationSet

KNOWN = ["memory", "graph", "analysis"]


def test_resolve_keeps_the_known_order_and_refuses_unknown_names() -> None:
    assert resolve(KNOWN, ["all"]) == KNOWN
    assert resolve(KNOWN, [" Analysis", "memory", ""]) == ["memory", "analysis"]
    assert resolve(KNOWN, []) == []
    with pytest.raises(ValueError, match=r"unknown features \['nope'\]"):
        resolve(KNOWN, ["memory", "nope"])


def test_select_returns_descriptors_and_a_descriptor_matches_its_operations() -> None:
    features = [Feature(name=n, operations=OperationSet(n)) for n in KNOWN]
    assert [f.name for f in select(features, ["graph"])] == ["graph"]
    with pytest.raises(ValueError, match="declares operations of 'graph'"):
        Feature(name="memory", operations=OperationSet("graph"))
