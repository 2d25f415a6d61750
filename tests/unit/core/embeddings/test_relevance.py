"""app/core/embeddings/relevance.py: the formula against the module's worked example."""

from __future__ import annotations

import math

import pytest

from app.core.embeddings.relevance import LEXICAL_WEIGHT, lexical_relevance, relevance


def test_the_documented_example() -> None:
    assert LEXICAL_WEIGHT == 1.25
    assert math.isclose(relevance(0.6, 0.4), 0.8)
    assert math.isclose(relevance(0.6, None), 0.6)
    assert math.isclose(relevance(None, 0.4), 0.5)
    assert relevance(-0.1, 0.0) == 0.0


@pytest.mark.parametrize("cosine", [-1.0, 0.0, 0.3, 0.99, 1.0])
@pytest.mark.parametrize("coverage", [0.0, 0.2, 0.8, 1.0])
def test_relevance_stays_in_the_unit_interval_and_grows_with_either_signal(cosine: float, coverage: float) -> None:
    r = relevance(cosine, coverage)
    assert 0.0 <= r <= 1.0
    assert r >= max(0.0, cosine) - 1e-12 and r >= lexical_relevance(coverage) - 1e-12
    assert relevance(min(1.0, cosine + 0.01), coverage) >= r
    assert relevance(cosine, min(1.0, coverage + 0.01)) >= r


def test_lexical_relevance_saturates_at_one() -> None:
    assert lexical_relevance(0.8) == 1.0 and lexical_relevance(0.0) == 0.0 and lexical_relevance(-1) == 0.0
