"""Per-key limits: a call rate (the `limits` library's moving window, in process memory) and a
cap on concurrent long-running operations.

Each replica limits independently, so the effective cluster-wide rate is at most `replicas * rate`;
that keeps the check free of database round trips.
"""

from __future__ import annotations

import math
import time

from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from app.core.errors import RateLimited


class RateLimiter:
    """At most `burst` calls per key in any window of `burst / rate` seconds (rounded up to whole
    seconds): an average of `rate` calls per second with bursts of up to `burst`. A rate of 0 turns
    the limit off."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = max(burst, 1)
        window = max(1, math.ceil(self.burst / rate)) if rate > 0 else 1
        self._item = RateLimitItemPerSecond(self.burst, window)
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    @property
    def enabled(self) -> bool:
        """False when the rate is 0 (no limit)."""
        return self.rate > 0

    def check(self, key: str) -> None:
        """Count one call for `key`, or raise RateLimited with a Retry-After hint."""
        if not self.enabled or self._limiter.hit(self._item, key):
            return
        reset = self._limiter.get_window_stats(self._item, key).reset_time
        wait = max(1, math.ceil(reset - time.time()))
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
