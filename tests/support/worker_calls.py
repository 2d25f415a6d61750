"""Engine-like functions for tests of the DuckDB worker protocol: module-level, so a worker process
can import them by reference as it does the engine's."""

from __future__ import annotations

from typing import Any

from app.core.errors import QueryError
from app.datasets.engine import ipc


def early_then_fail(cfg: Any, value: str) -> str:
    """Answer `value` early, then fail as a statement would."""
    ipc.answer_early(value)
    raise QueryError("failed after answering")


def early_then_value(cfg: Any, value: str) -> str:
    """Answer `value` early, then end with `value` repeated."""
    ipc.answer_early(value)
    return value * 2
