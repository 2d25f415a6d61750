"""app/memory/config.py: durations of the backfill interval (pytimeparse plus bare seconds), the
backfill settings' checks, and the search section of mcp://settings (thresholds in force)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest
from pydantic import ValidationError

from app.core.context import CallContext
from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.feature import LiveSection
from app.memory.config import MemorySettings, SearchSection, parse_duration, public_settings


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90.0), ("30s", 30.0), ("15m", 900.0), ("1h30m", 5400.0), ("2 days", 172800.0)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_unreadable_or_non_positive_intervals_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot parse duration"):
        parse_duration("soon")
    with pytest.raises(ValueError):
        MemorySettings(backfill_interval="0")
    assert MemorySettings(backfill_interval="").interval_seconds() is None


def test_backfill_settings_are_validated() -> None:
    assert MemorySettings(backfill_interval="15m").interval_seconds() == 900
    with pytest.raises(ValidationError, match="batch_size"):
        MemorySettings(backfill_batch_size=0)
    with pytest.raises(ValidationError, match="max_per_run"):
        MemorySettings(backfill_batch_size=50, backfill_max_per_run=10)
    with pytest.raises(ValidationError, match="duration"):
        MemorySettings(backfill_interval="every now and then")


async def test_the_search_section_reports_the_thresholds_in_force(monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = LocalOnnxEmbedder()
    ctx = cast(CallContext, SimpleNamespace(embedder=embedder))
    try:
        assert isinstance(public_settings(MemorySettings())["search"], LiveSection)  # resolved when read
        section = public_settings(MemorySettings())["search"]
        assert isinstance(section, SearchSection)
        shown = await section.resolved(ctx)
        assert shown.default_score_threshold == 0.591 and shown.score_threshold_source == "calibration (declared)"
        assert shown.default_score_thresholds == {"hybrid": 0.591, "semantic": 0.454, "lexical": 0.25}
        # The operator's value (the seed's variable) wins in every mode.
        monkeypatch.setenv("CAIRN_SEARCH_DEFAULT_SCORE_THRESHOLD", "0.3")
        shown = await public_settings(MemorySettings())["search"].resolved(ctx)
        assert shown.default_score_thresholds == {"hybrid": 0.3, "semantic": 0.3, "lexical": 0.3}
        assert shown.default_score_threshold == 0.3 and shown.score_threshold_source == "setting"
    finally:
        await embedder.close()
