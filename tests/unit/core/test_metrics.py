"""app/core/metrics.py: /metrics' text, with the pool gauges refreshed from the figures given."""

from __future__ import annotations

from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from app.core.metrics import CALLS, render


def _value(name: str) -> float | None:
    return REGISTRY.get_sample_value(name)


def test_render_refreshes_the_pool_gauges_and_serves_the_exposition_format() -> None:
    body, content_type = render({"checked_out": 3, "size": 10})
    assert content_type.startswith("text/plain") and "version=" in content_type
    assert _value("cairn_db_pool_checked_out") == 3 and _value("cairn_db_pool_size") == 10
    families = {f.name for f in text_string_to_metric_families(body.decode())}
    assert {"cairn_calls", "cairn_call_seconds", "cairn_errors", "cairn_db_pool_checked_out"} <= families
    render({})  # a pool that reports nothing counts as empty
    assert _value("cairn_db_pool_checked_out") == 0 and _value("cairn_db_pool_size") == 0


def test_render_without_pool_figures_leaves_the_gauges_alone() -> None:
    render({"checked_out": 2, "size": 5})
    render(None)
    assert _value("cairn_db_pool_checked_out") == 2


def test_calls_are_counted_per_operation_transport_and_outcome() -> None:
    labels = {"operation": "test_metrics_op", "transport": "rest", "outcome": "ok"}
    before = REGISTRY.get_sample_value("cairn_calls_total", labels) or 0.0
    CALLS.labels(**labels).inc()
    assert REGISTRY.get_sample_value("cairn_calls_total", labels) == before + 1
    assert 'operation="test_metrics_op"' in render(None)[0].decode()
