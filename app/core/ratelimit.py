"""Per-key rate limits: a token bucket per API key, in process memory.

Each replica limits independently, so the effective cluster-wide rate is at most
`replicas * rate`; that keeps the check free of database round trips.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from app.core.errors import RateLimited


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    """Token buckets keyed by API key id; `rate` tokens per second, up to `burst`."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = max(burst, 1)
        self._buckets: dict[str, _Bucket] = {}

    @property
    def enabled(self) -> bool:
        """False when the rate is 0 (no limit)."""
        return self.rate > 0

    def check(self, key: str) -> None:
        """Take one token for `key` or raise RateLimited with a Retry-After hint."""
        if not self.enabled:
            return
        now = time.monotonic()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) > 50_000:
                self._buckets.clear()
            bucket = self._buckets[key] = _Bucket(tokens=float(self.burst), stamp=now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.stamp) * self.rate)
        bucket.stamp = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return
        wait = max(1, math.ceil((1.0 - bucket.tokens) / self.rate))
        raise RateLimited(
            f"Rate limit exceeded for this API key ({self.rate:g} calls/s, burst {self.burst})",
            suggestions=[f"Retry after {wait} s"],
            details={"retry_after": wait},
            headers={"Retry-After": str(wait)},
        )


class JobSlots:
    """At most `limit` long-running operations at once per API key (in this replica)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._running: dict[str, int] = {}

    def acquire(self, key: str, operation: str) -> None:
        """Take a slot or raise RateLimited."""
        if self.limit <= 0:
            return
        if self._running.get(key, 0) >= self.limit:
            raise RateLimited(
                f"This API key already runs {self.limit} long operation(s); '{operation}' must wait",
                suggestions=["Wait for the running operation to finish, then retry"],
                details={"retry_after": 5},
                headers={"Retry-After": "5"},
            )
        self._running[key] = self._running.get(key, 0) + 1

    def release(self, key: str) -> None:
        """Give the slot back."""
        left = self._running.get(key, 0) - 1
        if left > 0:
            self._running[key] = left
        else:
            self._running.pop(key, None)
