"""Per-key limits kept in this process's memory: a call rate (the `limits` library's moving window), a
cap on concurrent long-running operations and on open event streams; per client address, a cap on
failed authentications.

A `cairn serve` process uses `app.core.fleet_limits` instead, which holds each limit across every
process sharing the database and falls back to these classes while the database cannot be reached.
These alone serve a stdio session (one user, one process). The awaitable methods (`admit`, `claim`,
`record_failure`, `verify_allowed`) are the interface both share with their callers.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Protocol

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
        raise self.exceeded(max(1, math.ceil(reset - time.time())))

    async def admit(self, key: str) -> None:
        """`check` (the executor awaits this on every call)."""
        self.check(key)

    def exceeded(self, wait: int) -> RateLimited:
        """The refusal of a call over the rate, to retry after `wait` seconds."""
        return RateLimited(
            f"Rate limit exceeded for this API key ({self.rate:g} calls/s, burst {self.burst})",
            suggestions=[f"Retry after {wait} s"],
            details={"retry_after": wait},
            headers={"Retry-After": str(wait)},
        )


class Slots(Protocol):
    """Slots per key (long jobs, event streams), in memory or shared by the fleet."""

    limit: int

    async def claim(self, key: str, operation: str = "") -> None:
        """Take a slot of `key` or raise RateLimited."""
        ...

    async def give_back(self, key: str) -> None:
        """Give one of `key`'s slots back."""
        ...

    async def close(self) -> None:
        """Give back every slot still held (the process stops)."""
        ...


class JobSlots:
    """At most `limit` long-running operations at once per API key (in this process)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._running: dict[str, int] = {}

    def acquire(self, key: str, operation: str) -> None:
        """Take a slot or raise RateLimited."""
        if self.limit <= 0:
            return
        if self._running.get(key, 0) >= self.limit:
            raise self.full(operation)
        self._running[key] = self._running.get(key, 0) + 1

    async def claim(self, key: str, operation: str = "") -> None:
        """`acquire`."""
        self.acquire(key, operation)

    async def give_back(self, key: str) -> None:
        """`release`."""
        self.release(key)

    async def close(self) -> None:
        """Nothing to give back: the counts die with the process."""

    def full(self, operation: str = "") -> RateLimited:
        """The refusal of one more long operation (`operation`) of a key that runs `limit` already."""
        return RateLimited(
            f"This API key already runs {self.limit} long operation(s); '{operation}' must wait",
            suggestions=["Wait for the running operation to finish, then retry"],
            details={"retry_after": 5},
            headers={"Retry-After": "5"},
        )

    def release(self, key: str) -> None:
        """Give the slot back."""
        left = self._running.get(key, 0) - 1
        if left > 0:
            self._running[key] = left
        else:
            self._running.pop(key, None)


class FailureLimiter:
    """At most `limit` failed authentications (unknown or revoked keys) per client address in any
    window of `window` seconds (in this process); past that the address is refused until its oldest
    counted failure leaves the window. A limit of 0 turns it off.

    Only the failure path writes here; the check costs one dict lookup for an address that has not
    failed."""

    def __init__(self, limit: int, window: float = 60.0, max_clients: int = 10_000) -> None:
        self.limit = limit
        self.window = window
        self.max_clients = max_clients
        self._failures: dict[str, deque[float]] = {}

    def retry_after(self, client: str) -> int | None:
        """Seconds until `client` may try a key again, or None when it may now."""
        recent = self._failures.get(client)
        if recent is None or len(recent) < self.limit:
            return None
        wait = recent[0] + self.window - time.monotonic()
        return max(1, math.ceil(wait)) if wait > 0 else None

    def refusal(self, client: str) -> RateLimited | None:
        """The error answering `client` while it is locked out, else None."""
        wait = self.retry_after(client)
        if wait is None:
            return None
        return RateLimited(
            f"Too many failed authentications from this address ({self.limit} per {self.window:g} s)",
            suggestions=[f"Check the API key, then retry after {wait} s"],
            details={"retry_after": wait},
            headers={"Retry-After": str(wait)},
        )

    def check(self, client: str) -> None:
        """Raise RateLimited with a Retry-After hint while `client` is locked out."""
        err = self.refusal(client)
        if err is not None:
            raise err

    def record(self, client: str) -> None:
        """Count one failed authentication of `client`."""
        if self.limit <= 0:
            return
        recent = self._failures.get(client)
        if recent is None:
            if len(self._failures) >= self.max_clients:
                self._prune()
            recent = self._failures[client] = deque(maxlen=self.limit)
        recent.append(time.monotonic())

    async def record_failure(self, client: str) -> None:
        """`record` (the key store awaits this on its failure path)."""
        self.record(client)

    async def verify_allowed(self, client: str) -> None:
        """Nothing beyond `check` in memory; the fleet's limiter reads the shared record here, right
        before a key lookup."""

    def _prune(self) -> None:
        """Forget addresses whose last failure left the window (all of them if none did: a flood from
        many addresses must not grow the table without bound)."""
        horizon = time.monotonic() - self.window
        stale = [client for client, recent in self._failures.items() if recent[-1] < horizon]
        for client in stale:
            del self._failures[client]
        if len(self._failures) >= self.max_clients:
            self._failures.clear()


class StreamSlots:
    """At most `limit` open `GET /mcp` event streams per key at once (in this process); 0 = no limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def acquire(self, key: str) -> None:
        """Take a slot or raise RateLimited."""
        if self.limit <= 0:
            return
        count = self._open.get(key, 0)
        if count >= self.limit:
            raise self.full()
        self._open[key] = count + 1

    async def claim(self, key: str, operation: str = "") -> None:
        """`acquire`."""
        self.acquire(key)

    async def give_back(self, key: str) -> None:
        """`release`."""
        self.release(key)

    async def close(self) -> None:
        """Nothing to give back: the counts die with the process."""

    def full(self, operation: str = "") -> RateLimited:
        """The refusal of one more stream of a key that holds `limit` already."""
        return RateLimited(
            f"This API key already has {self.limit} open event stream(s) (GET /mcp)",
            suggestions=["Close an open stream, then retry"],
            details={"retry_after": 5},
            headers={"Retry-After": "5"},
        )

    def release(self, key: str) -> None:
        """Give the slot back."""
        if self.limit <= 0:
            return
        left = self._open.get(key, 0) - 1
        if left > 0:
            self._open[key] = left
        else:
            self._open.pop(key, None)
