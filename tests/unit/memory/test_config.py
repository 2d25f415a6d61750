"""app/memory/config.py: durations of the backfill interval (pytimeparse plus bare seconds) and the
backfill settings' checks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.memory.config import MemorySettings, parse_duration


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
