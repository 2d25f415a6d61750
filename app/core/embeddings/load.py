"""The process's load: how many calls it is answering now, and when the last one ended.

One signal for every kind of background work. The executor counts each call in and out
(`Load.call_started`, `Load.call_finished`); the embedding queue's workers hold back while the process
is busy (`Load.busy`), and the datasets worker pool keeps a long query off one core while other calls
run beside it (`Load.in_flight`). `LOAD` is the process's one instance: there is one server, and one
set of cores, per process.

The count changes on the event loop; other threads read it as it is (one integer, never torn).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["LOAD", "Load"]


class Load:
    """Calls in flight, counted by whoever answers them. `clock` is a monotonic clock in seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._calls = 0
        self._last_end = float("-inf")

    @property
    def in_flight(self) -> int:
        """How many calls are being answered now."""
        return self._calls

    def call_started(self) -> None:
        """A call began."""
        self._calls += 1

    def call_finished(self) -> None:
        """A call ended (however it ended)."""
        self._calls -= 1
        self._last_end = self._clock()

    @contextmanager
    def call(self) -> Iterator[None]:
        """Count the block as one call in flight."""
        self.call_started()
        try:
            yield
        finally:
            self.call_finished()

    def busy(self, quiet: float) -> bool:
        """Whether the process is answering calls: one is in flight, or the last ended less than `quiet`
        seconds ago (a gap that short is one client's think time, not a quiet moment)."""
        return self._calls > 0 or self._clock() - self._last_end < quiet


LOAD = Load()
