"""The statement watchdog: one thread interrupts a call's DuckDB connection when its time limit passes
(`run_with_timeout`, 5003). In a worker process the limit is the whole call's (`CALL_DEADLINE`, see
`time_left`)."""

from __future__ import annotations

import atexit
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import duckdb

T = TypeVar("T")


class _Watchdogs:
    """One thread that interrupts connections whose deadline passed (a timer thread per statement would
    cost every statement a thread start and join)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: list[tuple[float, int, _Watchdog]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._cancelled = 0  # cancelled entries still in the heap (about)
        self._stopping = False

    def add(self, dog: _Watchdog, seconds: float) -> None:
        """Interrupt `dog`'s connection in `seconds` unless it is cancelled first."""
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + seconds, next(self._order), dog))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="cairn-duckdb-watchdog", daemon=True)
                self._thread.start()
            self._cv.notify()

    def cancel(self, dog: _Watchdog) -> None:
        """No interrupt for `dog` from now on; one already under way has landed when this returns (the
        interrupt is sent holding the lock this takes)."""
        with self._cv:
            dog.cancelled = True
            dog.con = None  # its entry may wait in the heap until its deadline: not the connection
            self._cancelled += 1
            if self._cancelled > 64 and self._cancelled * 2 > len(self._heap):
                self._heap = [entry for entry in self._heap if not entry[2].cancelled]
                heapq.heapify(self._heap)
                self._cancelled = 0

    def stop(self) -> None:
        """End the thread (at exit: a thread left waiting keeps DuckDB's module from being torn down
        cleanly)."""
        with self._cv:
            thread, self._thread = self._thread, None
            self._stopping = True
            self._cv.notify()
        if thread is not None:
            thread.join(timeout=5)
        with self._cv:
            self._stopping = False

    def _run(self) -> None:
        with self._cv:
            while not self._stopping:
                while self._heap and self._heap[0][2].cancelled:
                    heapq.heappop(self._heap)
                    self._cancelled = max(0, self._cancelled - 1)
                if not self._heap:
                    self._cv.wait()
                    continue
                due = self._heap[0][0] - time.monotonic()
                if due > 0:
                    self._cv.wait(due)
                    continue
                dog = heapq.heappop(self._heap)[2]
                dog.fired = True
                try:
                    if dog.con is not None:
                        dog.con.interrupt()
                except Exception:  # the connection may already be closed
                    pass
                dog.con = None
                del dog  # this thread outlives its calls: it keeps no connection alive


_WATCHDOGS = _Watchdogs()
atexit.register(_WATCHDOGS.stop)


class _Watchdog:
    def __init__(self, con: duckdb.DuckDBPyConnection, seconds: float) -> None:
        self.fired = False
        self.cancelled = False
        self.con: duckdb.DuckDBPyConnection | None = con
        self._seconds = seconds

    def __enter__(self) -> _Watchdog:
        _WATCHDOGS.add(self, self._seconds)
        return self

    def __exit__(self, *exc: Any) -> None:
        _WATCHDOGS.cancel(self)


# When the current call must end (`time.monotonic()`), set by a worker process for each request it
# serves: the statement's watchdog gets what is left of the whole call's time limit.
CALL_DEADLINE: ContextVar[float | None] = ContextVar("cairn_duckdb_call_deadline", default=None)


def time_left(limit: float) -> float:
    """Seconds the watchdog of the next statement may wait: `limit`, or less when the current call's
    deadline (`CALL_DEADLINE`) comes first (at least a millisecond: a statement started past it is
    interrupted at once)."""
    deadline = CALL_DEADLINE.get()
    if deadline is None:
        return limit
    return max(0.001, min(limit, deadline - time.monotonic()))


def run_with_timeout(con: duckdb.DuckDBPyConnection, seconds: float, fn: Callable[[], T]) -> tuple[T, bool]:
    """Run `fn` (which uses `con`); a watchdog interrupts the connection after `seconds`.

    Returns (result, fired): `fired` is True when the watchdog went off although `fn` still returned
    (the interrupt came too late to stop it). Raises TimedOut when the interrupt stopped `fn`."""
    with _Watchdog(con, seconds) as dog:
        try:
            value = fn()
        except duckdb.InterruptException:
            if dog.fired:
                raise TimedOut() from None
            raise
    return value, dog.fired


class TimedOut(Exception):
    """The watchdog interrupted the statement."""
