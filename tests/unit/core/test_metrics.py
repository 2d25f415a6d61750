"""app/core/metrics.py: /metrics' text, with the pool gauges refreshed from the figures given, and under
`--workers` every worker process's figures added up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from app.core.metrics import CALLS, MULTIPROC_ENV, prepare_multiprocess, render


def _value(name: str) -> float | None:
    return REGISTRY.get_sample_value(name)


def test_render_refreshes_the_pool_size_and_serves_the_exposition_format() -> None:
    # Connections in use are counted by the pools' checkout and checkin events (other pools of this
    # test process move that gauge at any time), so only the size is read back here.
    body, content_type = render({"checked_out": 3, "size": 10})
    assert content_type.startswith("text/plain") and "version=" in content_type
    assert _value("cairn_db_pool_size") == 10
    families = {f.name for f in text_string_to_metric_families(body.decode())}
    assert {"cairn_calls", "cairn_call_seconds", "cairn_errors", "cairn_db_pool_checked_out"} <= families
    render({})  # a pool that reports nothing counts as empty
    assert _value("cairn_db_pool_size") == 0


def test_render_without_pool_figures_leaves_the_gauges_alone() -> None:
    render({"checked_out": 2, "size": 5})
    render(None)
    assert _value("cairn_db_pool_size") == 5


def test_calls_are_counted_per_operation_transport_and_outcome() -> None:
    labels = {"operation": "test_metrics_op", "transport": "rest", "outcome": "ok"}
    before = REGISTRY.get_sample_value("cairn_calls_total", labels) or 0.0
    CALLS.labels(**labels).inc()
    assert REGISTRY.get_sample_value("cairn_calls_total", labels) == before + 1
    assert 'operation="test_metrics_op"' in render(None)[0].decode()


_WORKER = """
import sys
from app.core.metrics import CALLS, DB_POOL_CHECKED_OUT
CALLS.labels("test_multi_op", "rest", "ok").inc(int(sys.argv[1]))
DB_POOL_CHECKED_OUT.inc(int(sys.argv[2]))
print("ready", flush=True)
if sys.argv[3] == "hold":
    sys.stdin.read()
"""


def _worker(n: int, checked_out: int, hold: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _WORKER, str(n), str(checked_out), "hold" if hold else "exit"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _samples(body: bytes) -> dict[str, float]:
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == "cairn_calls_total" and sample.labels.get("operation") != "test_multi_op":
                continue
            found[sample.name] = found.get(sample.name, 0.0) + sample.value
    return found


def test_with_workers_metrics_add_up_every_process_and_forget_the_gauges_of_dead_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MULTIPROC_ENV, "")  # restored after the test
    directory = tmp_path / "metrics" / "8000"
    directory.mkdir(parents=True)
    (directory / "counter_999999.db").write_bytes(b"left by an earlier run")
    prepare_multiprocess(directory)
    assert os.environ[MULTIPROC_ENV] == str(directory) and not list(directory.iterdir())  # emptied
    for proc in (_worker(3, 2), _worker(4, 2)):
        assert proc.wait(timeout=60) == 0
    live = _worker(5, 1, hold=True)
    try:
        assert live.stdout is not None and live.stdout.readline().strip() == "ready"
        found = _samples(render(None)[0])
        assert found["cairn_calls_total"] == 12  # every process's calls, the dead ones' included
        assert found["cairn_db_pool_checked_out"] == 1  # only the live process's connections
    finally:
        live.communicate("", timeout=60)
