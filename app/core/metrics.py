"""Prometheus metrics (default registry), served as text at /metrics."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

CALLS = Counter("cairn_calls_total", "Operation calls", ["operation", "transport", "outcome"])
LATENCY = Histogram(
    "cairn_call_seconds",
    "Operation latency",
    ["operation", "transport"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
ERRORS = Counter("cairn_errors_total", "Errors by code", ["code", "transport"])
DB_POOL_CHECKED_OUT = Gauge("cairn_db_pool_checked_out", "DB connections in use")
DB_POOL_SIZE = Gauge("cairn_db_pool_size", "DB pool size")


def render(pool_status: dict[str, int] | None = None) -> tuple[bytes, str]:
    """The exposition text, refreshing the pool gauges first."""
    if pool_status is not None:
        DB_POOL_CHECKED_OUT.set(pool_status.get("checked_out", 0))
        DB_POOL_SIZE.set(pool_status.get("size", 0))
    return generate_latest(), CONTENT_TYPE_LATEST
