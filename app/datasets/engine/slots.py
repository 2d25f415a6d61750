"""Engine slots shared fairly between callers (API keys): `FairSlots`. A call takes one of the `size`
slots, and one caller holds at most `per_key` of them. While it waits for a slot a call holds no
thread. Waiting calls are served in arrival order among the callers under their cap, and a caller with
too many calls already waiting gets 4290."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable

from app.core.errors import RateLimited


class _Waiter:
    __slots__ = ("granted", "key", "wake")

    def __init__(self, key: str, wake: Callable[[], None]) -> None:
        self.key = key
        self.wake = wake
        self.granted = False


class FairSlots:
    """`size` slots shared between callers. A caller holds at most `per_key` at once. A freed slot goes
    to the first waiting call whose caller is under its cap. A caller with `waiting_per_key` calls
    waiting gets RateLimited. Usable from the event loop (`acquire`) and from threads
    (`acquire_sync`)."""

    def __init__(self, size: int, per_key: int, waiting_per_key: int) -> None:
        self.size = size
        self.per_key = max(1, min(per_key, size))
        self.waiting_per_key = waiting_per_key
        self._lock = threading.Lock()
        self._free = size
        self._held: dict[str, int] = {}
        self._waiting: dict[str, int] = {}
        self._queue: deque[_Waiter] = deque()

    def held(self, key: str) -> int:
        """Slots `key` holds now."""
        with self._lock:
            return self._held.get(key, 0)

    def waiting(self) -> int:
        """Calls waiting for a slot."""
        with self._lock:
            return len(self._queue)

    def _take(self, key: str) -> None:
        self._free -= 1
        self._held[key] = self._held.get(key, 0) + 1

    def _admit(self, key: str, wake: Callable[[], None]) -> _Waiter | None:
        """Take a slot now (None), or queue a waiter. A waiter still queued is one whose caller is at
        its cap or one that found no free slot, so a call under its cap that finds a slot free jumps
        no queue."""
        with self._lock:
            if self._free > 0 and self._held.get(key, 0) < self.per_key:
                self._take(key)
                return None
            if self._waiting.get(key, 0) >= self.waiting_per_key:
                raise RateLimited(
                    f"This API key already has {self._held.get(key, 0)} DuckDB queries running and "
                    f"{self._waiting[key]} waiting",
                    suggestions=["Wait for a running query to finish, then retry"],
                    details={"retry_after": 1},
                    headers={"Retry-After": "1"},
                )
            waiter = _Waiter(key, wake)
            self._queue.append(waiter)
            self._waiting[key] = self._waiting.get(key, 0) + 1
            return waiter

    def _grant(self) -> list[Callable[[], None]]:
        """Give free slots to waiters (under the lock); their wake-up calls, to make outside it."""
        woken: list[Callable[[], None]] = []
        for waiter in list(self._queue):
            if self._free <= 0:
                break
            if self._held.get(waiter.key, 0) < self.per_key:
                self._queue.remove(waiter)
                self._unwait(waiter.key)
                self._take(waiter.key)
                waiter.granted = True
                woken.append(waiter.wake)
        return woken

    def _unwait(self, key: str) -> None:
        left = self._waiting[key] - 1
        if left:
            self._waiting[key] = left
        else:
            del self._waiting[key]

    def _withdraw(self, waiter: _Waiter) -> bool:
        """Take a waiter out of the queue; False when it was given a slot meanwhile."""
        with self._lock:
            if waiter.granted:
                return False
            self._queue.remove(waiter)
            self._unwait(waiter.key)
            return True

    def release(self, key: str) -> None:
        """Give back a slot of `key`."""
        with self._lock:
            left = self._held[key] - 1
            if left:
                self._held[key] = left
            else:
                del self._held[key]
            self._free += 1
            woken = self._grant()
        for wake in woken:
            wake()

    async def acquire(self, key: str) -> None:
        """Wait (without a thread) for a slot of `key`."""
        loop = asyncio.get_running_loop()
        granted: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: the call went with it
                loop.call_soon_threadsafe(_resolve, granted)

        waiter = self._admit(key, wake)
        if waiter is None:
            return
        try:
            await granted
        except BaseException:
            if not self._withdraw(waiter):
                self.release(key)
            raise

    def acquire_sync(self, key: str) -> None:
        """Wait (blocking this thread) for a slot of `key`."""
        event = threading.Event()
        if self._admit(key, event.set) is not None:
            event.wait()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
