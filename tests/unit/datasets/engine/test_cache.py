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


def test_an_entry_remembered_in_an_older_epoch_is_read_again_from_the_shared_entries(tmp_path: Path) -> None:
    (tmp_path / "cache").mkdir()
    (tmp_path / "results").mkdir()
    # Two hosts' caches over the same entries (the shared store stands in as one folder).
    a = Cache(tmp_path / "cache", tmp_path / "results", ttl=60, max_bytes=1000, memory_entries=8)
    b = Cache(tmp_path / "cache", tmp_path / "results", ttl=60, max_bytes=1000, memory_entries=8)
    a.put("query:1", {"meta": {"query_id": "q_1"}, "project": "p"}, epoch=0)
    a.put("query:2", {"meta": {"query_id": "q_2"}, "project": "p"}, epoch=0)
    assert b.get("query:1", 0) is not None and b.get("query:2", 0) is not None  # both held in b's memory
    assert [e["key"] for e in a.invalidate("q_1", None, "p")] == ["query:1"]
    assert b.get("query:1", 0) is not None  # the same epoch: b's memory still answers
    # The invalidating call raised the epoch: b reads again, and finds only the entry still stored.
    assert b.get("query:1", 1) is None
    again = b.get("query:2", 1)
    assert again is not None and again["meta"]["query_id"] == "q_2"


def test_an_entry_whose_stored_result_is_gone_is_a_miss(cache: Cache) -> None:
    kept = store(cache.results, "kept", 10)
    cache.put("query:kept", {"result_path": str(kept)})
    cache.put("query:gone", {"result_path": str(cache.results / "gone.parquet")})
    assert cache.get("query:kept") is not None and cache.get("query:gone") is None
    assert not (cache.dir / "query_gone.json").exists()


def test_hits_are_counted_per_key_and_forgotten_with_the_entry(cache: Cache) -> None:
    cache.put("query:a", {"meta": {"query_id": "q_a"}})
    assert cache.hits("query:a") == 0 and cache.get("query:b") is None and cache.hits("query:b") == 0
    assert cache.get("query:a") is not None and cache.get("query:a") is not None
    assert cache.hits("query:a") == 2
    token = cache_module.COUNT_HITS.set(False)  # a lookup that only prices a call
    try:
        assert cache.get("query:a") is not None
    finally:
        cache_module.COUNT_HITS.reset(token)
    assert cache.hits("query:a") == 2
    cache.remove(["query:a"])
    assert cache.hits("query:a") == 0


def test_a_pattern_matches_the_key_the_label_or_the_query_id() -> None:
    entry = {"key": "query:abc", "label": "by-region", "meta": {"query_id": "q_0123456789abcdef"}}
    assert cache_module.matches(entry, "query:*") and cache_module.matches(entry, "by-*")
    assert cache_module.matches(entry, "q_0123*") and not cache_module.matches(entry, "profile:*")
    assert not cache_module.matches({}, "*")  # an entry without names matches nothing
