"""app/core/ratelimit.py: the per-key call rate and the long-job slots."""

from __future__ import annotations

import time

import pytest

from app.core.errors import RateLimited
from app.core.ratelimit import JobSlots, RateLimiter


def _outcomes(limiter: RateLimiter, key: str, n: int) -> list[int]:
    codes = []
    for _ in range(n):
        try:
            limiter.check(key)
            codes.append(200)
        except RateLimited as err:
            codes.append(err.status)
    return codes


def test_burst_then_refused_with_retry_after_per_key() -> None:
    limiter = RateLimiter(rate=0.5, burst=3)  # 3 calls per 6 s window
    assert _outcomes(limiter, "a", 5) == [200, 200, 200, 429, 429]
    with pytest.raises(RateLimited) as caught:
        limiter.check("a")
    err = caught.value
    assert err.details is not None
    assert err.code == 4290 and err.headers["Retry-After"] == str(err.details["retry_after"])
    assert 1 <= int(err.headers["Retry-After"]) <= 6
    assert _outcomes(limiter, "b", 3) == [200, 200, 200]  # another key has its own window


def test_window_frees_a_slot_after_it_passes() -> None:
    limiter = RateLimiter(rate=2, burst=2)  # 2 calls per 1 s window
    assert _outcomes(limiter, "k", 3) == [200, 200, 429]
    time.sleep(1.1)
    assert _outcomes(limiter, "k", 3) == [200, 200, 429]


def test_rate_zero_disables_the_limit() -> None:
    limiter = RateLimiter(rate=0, burst=1)
    assert not limiter.enabled
    assert _outcomes(limiter, "k", 50) == [200] * 50


def test_job_slots_cap_concurrent_long_operations_per_key() -> None:
    slots = JobSlots(limit=2)
    slots.acquire("k", "ingest")
    slots.acquire("k", "ingest")
    with pytest.raises(RateLimited) as caught:
        slots.acquire("k", "ingest")
    assert caught.value.headers["Retry-After"] == "5"
    slots.acquire("other", "ingest")
    slots.release("k")
    slots.acquire("k", "ingest")
    JobSlots(limit=0).acquire("k", "x")  # 0: no cap
