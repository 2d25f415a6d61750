"""app/datasets/engine/cache.py: the result store is swept when a sweep may delete something, not after every miss."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from app.datasets.engine import cache as cache_module
from app.datasets.engine.cache import Cache


def store(results: Path, name: str, size: int, age: float = 0.0) -> Path:
    path = results / f"{name}.parquet"
    path.write_bytes(b"x" * size)
    if age:
        then = time.time() - age
        os.utime(path, (then, then))
    return path


@pytest.fixture
def cache(tmp_path: Path) -> Cache:
    (tmp_path / "cache").mkdir()
    (tmp_path / "results").mkdir()
    return Cache(tmp_path / "cache", tmp_path / "results", ttl=60, max_bytes=1000, memory_entries=8)


def test_the_first_miss_sweeps_then_not_until_the_interval(cache: Cache) -> None:
    old = store(cache.results, "old", 10, age=7200)
    assert cache.sweep_if_due(3600, store(cache.results, "a", 10)) == 1 and not old.exists()
    older = store(cache.results, "older", 10, age=7200)
    assert cache.sweep_if_due(3600, store(cache.results, "b", 10)) == 0 and older.exists()


def test_a_store_that_may_pass_the_cap_is_swept_at_once(cache: Cache) -> None:
    first = store(cache.results, "first", 400, age=30)
    cache.sweep_if_due(3600, first)
    second = store(cache.results, "second", 400, age=20)
    assert cache.sweep_if_due(3600, second) == 0  # 800 bytes: under the cap
    third = store(cache.results, "third", 400)
    assert cache.sweep_if_due(3600, third) == 1  # 1200 bytes: the oldest goes now
    assert not first.exists() and second.exists() and third.exists()


class Clock:
    """The cache's clock, moved on by hand."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.ahead

    def time(self) -> float:
        return time.time() + self.ahead


def test_the_interval_follows_a_short_result_ttl(cache: Cache, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(cache_module, "time", clock)
    cache.sweep_if_due(1.0, store(cache.results, "a", 10))
    expired = store(cache.results, "expired", 10, age=5)
    assert cache.sweep_if_due(1.0, None) == 0  # swept less than a tenth of the TTL ago
    clock.ahead = 0.15
    assert cache.sweep_if_due(1.0, None) == 1 and not expired.exists()
    monkeypatch.setattr(cache_module, "SWEEP_INTERVAL", 0.0)
    late = store(cache.results, "late", 10, age=7200)
    assert cache.sweep_if_due(3600, None) == 1 and not late.exists()
