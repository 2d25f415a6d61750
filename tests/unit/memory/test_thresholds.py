"""app/memory/thresholds.py: the default thresholds per mode as a rule over a model's calibration, the
operator's setting winning in every mode, and the mode a search ran in choosing its default."""

from __future__ import annotations

import pytest

from app.core.embeddings.calibration import LOCAL
from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.embeddings.provider import Calibration
from app.memory.thresholds import LEXICAL, defaults, fixed, rule


def test_the_rule_over_the_local_models_calibration_is_the_worked_example() -> None:
    found = rule(LOCAL)
    assert (found.semantic, found.lexical, found.hybrid) == (0.454, 0.25, 0.591)
    assert found.source == "calibration (declared)"
    assert found.as_dict() == {"hybrid": 0.591, "semantic": 0.454, "lexical": LEXICAL}


def test_the_rule_follows_the_model() -> None:
    # A model whose unrelated texts already score 0.65: its semantic default moves up with it.
    found = rule(Calibration(unrelated=0.65, related=0.85, source="measured"))
    assert found.semantic == pytest.approx(0.75) and found.hybrid == pytest.approx(0.8125, abs=1e-3)
    assert found.lexical == LEXICAL and found.source == "calibration (measured)"


def test_a_search_on_words_alone_uses_the_lexical_default() -> None:
    found = rule(LOCAL)
    assert found.of("semantic") == 0.454 and found.of("hybrid") == 0.591
    assert found.of("lexical") == found.of("lexical_fallback") == 0.25


async def test_the_operators_setting_wins_in_every_mode() -> None:
    embedder = LocalOnnxEmbedder()
    try:
        assert await defaults(embedder, 0.3) == fixed(0.3)
        assert fixed(0.3).as_dict() == {"hybrid": 0.3, "semantic": 0.3, "lexical": 0.3}
        assert fixed(0.3).source == "setting"
        assert await defaults(embedder, None) == rule(LOCAL)
    finally:
        await embedder.close()
