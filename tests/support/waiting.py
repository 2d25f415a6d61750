"""Waiting for a condition instead of sleeping for a guessed time.

`eventually` (async) and `eventually_sync` call `check()` until what it returns is truthy, and return
that value; past `timeout` seconds they raise `TimeoutError` naming the last value observed (or the
last exception `check` raised), so a failure says what the test saw, not only that it waited.
`check` may be a plain function or, for `eventually`, a coroutine function."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


class _Last:
    """What the last try gave: a value or an exception."""

    def __init__(self) -> None:
        self.value: object = None
        self.error: BaseException | None = None

    def describe(self, what: str, timeout: float, tries: int) -> str:
        seen = f"raised {self.error!r}" if self.error is not None else f"returned {self.value!r}"
        return f"{what} not met within {timeout:g} s ({tries} tries); the last check {seen}"


@overload
async def eventually(
    check: Callable[[], Awaitable[T]],
    timeout: float = ...,
    interval: float = ...,
    what: str = ...,
    errors: tuple[type[BaseException], ...] = ...,
) -> T: ...


@overload
async def eventually(
    check: Callable[[], T],
    timeout: float = ...,
    interval: float = ...,
    what: str = ...,
    errors: tuple[type[BaseException], ...] = ...,
) -> T: ...


async def eventually(
    check: Callable[[], Any],
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
    errors: tuple[type[BaseException], ...] = (),
) -> Any:
    """Await `check()` (or call it) until it returns something truthy; returns that value. Exceptions
    of the `errors` types count as a failed try; others propagate at once."""
    deadline = time.monotonic() + timeout
    last, tries = _Last(), 0
    while True:
        tries += 1
        try:
            value = check()
            if inspect.isawaitable(value):
                value = await value
        except errors as err:
            last.error = err
        else:
            last.value, last.error = value, None
            if value:
                return value
        if time.monotonic() >= deadline:
            raise TimeoutError(last.describe(what, timeout, tries))
        await asyncio.sleep(interval)


def eventually_sync(
    check: Callable[[], T],
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
    errors: tuple[type[BaseException], ...] = (),
) -> T:
    """`eventually` for code without an event loop (threads, subprocess tests)."""
    deadline = time.monotonic() + timeout
    last, tries = _Last(), 0
    while True:
        tries += 1
        try:
            value = check()
        except errors as err:
            last.error = err
        else:
            last.value, last.error = value, None
            if value:
                return value
        if time.monotonic() >= deadline:
            raise TimeoutError(last.describe(what, timeout, tries))
        time.sleep(interval)


class UntilCancelled:
    """Work that never ends by itself: `run()` sets `running`, waits, and sets `cancelled` when the
    cancellation reaches it (then lets it through)."""

    def __init__(self) -> None:
        self.running = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def run(self) -> None:
        """Wait until cancelled."""
        self.running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
