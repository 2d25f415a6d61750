"""Prometheus metrics, served as text at /metrics.

One process (`cairn serve`): the default registry. `cairn serve --workers N`: the parent gives every
worker one directory (`prepare_multiprocess`, exported as `PROMETHEUS_MULTIPROC_DIR` before the workers
start, so prometheus_client keeps each worker's values in files there), and /metrics, whichever worker
answers it, adds up every worker's files (`MultiProcessCollector`): counters and histograms summed, the
pool gauges summed over live workers, the queue gauges (read from the shared database) the latest."""

from __future__ import annotations

import glob
import os
import re
import shutil
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

CALLS = Counter("cairn_calls_total", "Operation calls", ["operation", "transport", "outcome"])
LATENCY = Histogram(
    "cairn_call_seconds",
    "Operation latency",
    ["operation", "transport"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
ERRORS = Counter("cairn_errors_total", "Errors by code", ["code", "transport"])
DB_POOL_CHECKED_OUT = Gauge(
    "cairn_db_pool_checked_out", "DB connections in use (every pool of the process)", multiprocess_mode="livesum"
)
DB_POOL_SIZE = Gauge("cairn_db_pool_size", "DB pool size", multiprocess_mode="livesum")

_LIVE_FILE = re.compile(r"gauge_live\w+?_(\d+)\.db$")


def prepare_multiprocess(directory: Path) -> None:
    """Make `directory` the (emptied) home of the metrics of the worker processes started after this
    call (they inherit the environment)."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    os.environ[MULTIPROC_ENV] = str(directory)


def _forget_dead_workers(directory: str) -> None:
    """Drop the live gauges of workers that are gone (killed, or restarted under another pid)."""
    pids = {
        int(m.group(1)) for f in glob.glob(os.path.join(directory, "gauge_live*.db")) if (m := _LIVE_FILE.search(f))
    }
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]
        except PermissionError:
            pass


def render(pool_status: dict[str, int] | None = None) -> tuple[bytes, str]:
    """The exposition text (every worker's, under `--workers`), refreshing this process's pool size
    first. Connections in use are counted as they are checked out and in (`app.core.db.Database`), over
    every pool of the process (replicas' too): setting that gauge here as well would race with them."""
    if pool_status is not None:
        DB_POOL_SIZE.set(pool_status.get("size", 0))
    directory = os.environ.get(MULTIPROC_ENV)
    if not directory:
        return generate_latest(), CONTENT_TYPE_LATEST
    _forget_dead_workers(directory)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return generate_latest(registry), CONTENT_TYPE_LATEST
