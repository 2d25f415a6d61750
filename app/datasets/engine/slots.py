"""Engine slots shared fairly between callers: `FairSlots`. A caller is whom the work counts against (a
key, or the project a bound key is limited to: see `service_common.caller_of`).

- **Cap.** A call takes one of the `size` slots, and one caller holds at most `per_key` of them. While
  it waits for a slot a call holds no thread. A caller with too many calls already waiting gets 4290.
- **Order.** A freed slot goes to the waiting caller that holds the fewest slots, then to the one served
  least recently (one never served, or not for a long while, first), then to the earliest call: round
  robin across callers, so a caller that keeps many calls waiting gets no more turns than one that
  sends one call at a time.
- **Burst.** A caller that holds no slot and has run no long call lately (`may_burst`: the pool's
  `priority.LongCallers.heavy`) takes one of `burst` extra slots when the `size` ones are taken: a short call
  never waits for other callers' long ones to end. Long calls run at a lowered priority (see `pool`),
  so the short one gets the CPU once it has its worker. A caller holding a burst slot moves to a
  regular one as soon as one is free and nobody waits for it, so the burst slots stay free for
  newcomers."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections import deque
from collections.abc import Callable

from cachetools import LRUCache

from app.core.errors import RateLimited

# Callers whose latest turn is remembered (the least recently used are forgotten: they go first again).
SERVED_MEMORY = 4096


class _Waiter:
    __slots__ = ("granted", "key", "seq", "wake")

    def __init__(self, key: str, wake: Callable[[], None], seq: int) -> None:
        self.key = key
        self.wake = wake
        self.seq = seq
        self.granted = False


def _anyone(key: str) -> bool:
    return True


class FairSlots:
    """`size` slots (and `burst` extra ones for callers holding none) shared between callers; see the
    module's docstring. A caller with `waiting_per_key` calls waiting gets RateLimited. Usable from the
    event loop (`acquire`) and from threads (`acquire_sync`)."""

    def __init__(
        self,
        size: int,
        per_key: int,
        waiting_per_key: int,
        burst: int = 0,
        may_burst: Callable[[str], bool] = _anyone,
    ) -> None:
        self.size = size
        self.per_key = max(1, min(per_key, size))
        self.waiting_per_key = waiting_per_key
        self.burst = max(0, burst)
        self._may_burst = may_burst
        self._lock = threading.Lock()
        self._free = size
        self._burst_free = self.burst
        self._held: dict[str, int] = {}
        self._bursting: dict[str, int] = {}  # the burst slots among those a caller holds
        self._queues: dict[str, deque[_Waiter]] = {}
        self._queued = 0
        self._seq = itertools.count(1)
        self._served: LRUCache[str, int] = LRUCache(SERVED_MEMORY)

    def held(self, key: str) -> int:
        """Slots `key` holds now (burst ones included)."""
        with self._lock:
            return self._held.get(key, 0)

    def waiting(self) -> int:
        """Calls waiting for a slot."""
        with self._lock:
            return self._queued

    def bursting(self) -> int:
        """Burst slots taken now."""
        with self._lock:
            return self.burst - self._burst_free

    def _take(self, key: str, burst: bool) -> None:
        if burst:
            self._burst_free -= 1
            self._bursting[key] = self._bursting.get(key, 0) + 1
        else:
            self._free -= 1
        self._held[key] = self._held.get(key, 0) + 1
        self._served[key] = next(self._seq)

    def _kind_for(self, key: str) -> bool | None:
        """The slot `key` may take now: a regular one (False), a burst one (True), or none (None)."""
        held = self._held.get(key, 0)
        if self._free > 0 and held < self.per_key:
            return False
        if self._burst_free > 0 and held == 0 and self._may_burst(key):
            return True
        return None

    def _admit(self, key: str, wake: Callable[[], None]) -> _Waiter | None:
        """Take a slot now (None), or queue a waiter. Waiters still queued are those that may take no
        free slot (see `_grant`), so a call that may take one jumps no queue."""
        with self._lock:
            kind = self._kind_for(key)
            if kind is not None:
                self._take(key, kind)
                return None
            queue = self._queues.setdefault(key, deque())
            if len(queue) >= self.waiting_per_key:
                raise RateLimited(
                    f"This caller already has {self._held.get(key, 0)} DuckDB queries running and {len(queue)} waiting",
                    suggestions=["Wait for a running query to finish, then retry"],
                    details={"retry_after": 1},
                    headers={"Retry-After": "1"},
                )
            waiter = _Waiter(key, wake, next(self._seq))
            queue.append(waiter)
            self._queued += 1
            return waiter

    def _next(self) -> tuple[str, bool] | None:
        """The waiting caller the next free slot goes to, and whether that slot is a burst one."""
        best: tuple[tuple[int, int, int], str, bool] | None = None
        for key, queue in self._queues.items():
            kind = self._kind_for(key)
            if kind is None:
                continue
            rank = (self._held.get(key, 0), self._served.get(key, 0), queue[0].seq)
            if best is None or rank < best[0]:
                best = (rank, key, kind)
        return None if best is None else (best[1], best[2])

    def _grant(self) -> list[Callable[[], None]]:
        """Give free slots to waiters (under the lock); their wake-up calls, to make outside it."""
        woken: list[Callable[[], None]] = []
        while (chosen := self._next()) is not None:
            key, burst = chosen
            queue = self._queues[key]
            waiter = queue.popleft()
            if not queue:
                del self._queues[key]
            self._queued -= 1
            self._take(key, burst)
            waiter.granted = True
            woken.append(waiter.wake)
        # Nobody waits for the regular slots left: the callers in burst slots move there.
        for key in list(self._bursting):
            if self._free <= 0:
                break
            self._free -= 1
            self._burst_free += 1
            self._unburst(key)
        return woken

    def _unburst(self, key: str) -> None:
        left = self._bursting[key] - 1
        if left:
            self._bursting[key] = left
        else:
            del self._bursting[key]

    def _withdraw(self, waiter: _Waiter) -> bool:
        """Take a waiter out of the queue; False when it was given a slot meanwhile."""
        with self._lock:
            if waiter.granted:
                return False
            queue = self._queues[waiter.key]
            queue.remove(waiter)
            if not queue:
                del self._queues[waiter.key]
            self._queued -= 1
            return True

    def release(self, key: str) -> None:
        """Give back a slot of `key` (a burst one first)."""
        with self._lock:
            left = self._held[key] - 1
            if left:
                self._held[key] = left
            else:
                del self._held[key]
            if key in self._bursting:
                self._unburst(key)
                self._burst_free += 1
            else:
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
