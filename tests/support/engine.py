"""Helpers of the DuckDB engine's unit tests: waiting for a condition (never for a fixed time) and for
worker processes to be gone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import psutil


async def until(condition: Callable[[], bool], timeout: float = 20.0, what: str = "the condition") -> None:
    """Wait on the event loop until `condition()` holds (AssertionError past `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not come within {timeout} s"
        await asyncio.sleep(0.01)


def gone(pids: list[int], timeout: float = 5.0) -> bool:
    """True once none of `pids` is a running process (zombies count as gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                continue
        if not alive:
            return True
        time.sleep(0.05)
    return False
