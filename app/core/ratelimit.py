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
            suggestions=[f"Retry after {wait} s"], details={"retry_after": wait},
            headers={"Retry-After": str(wait)},
        )
