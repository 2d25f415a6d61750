"""app/datasets/engine/worker.py: a worker process answers each request with the function's value or
error, within the call's deadline, and ends when its server is gone, however the server ended."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from app.core.errors import MemoryLimit, QueryError
from app.datasets.engine import worker
from app.datasets.engine.ipc import EARLY_ALLOWED
from app.datasets.engine.pool import SPARE
from app.datasets.engine.watchdog import CALL_DEADLINE
from tests.support.engine import gone


@pytest.mark.slow  # worker processes
def test_workers_do_not_outlive_a_killed_server(tmp_path: Path) -> None:
    """The server is SIGKILLed (no shutdown hook, no atexit): its workers still exit at once."""
    script = textwrap.dedent(
        """
        import sys, time
        from app.datasets.engine.pool import WorkerPool
        pool = WorkerPool(2, 1, 0)
        print(" ".join(str(p) for p in pool.pids()), flush=True)
        time.sleep(60)
        """
    )
    server = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert server.stdout is not None
        pids = [int(p) for p in server.stdout.readline().split()]
        assert len(pids) == 2 + SPARE and all(psutil.pid_exists(p) for p in pids)
        server.kill()
        server.wait(10)
        assert gone(pids)
    finally:
        server.kill()


def seen(cfg: Any, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """What a call sees: its arguments, its deadline and whether it may answer early."""
    return cfg, args, kwargs, CALL_DEADLINE.get(), EARLY_ALLOWED.get()


def test_a_request_is_answered_with_the_functions_value() -> None:
    before = time.monotonic()
    reply = worker._answer((seen, "cfg", (1, 2), {"k": 3}, 30.0, True))
    assert reply.status == "ok" and not reply.recycle
    cfg, args, kwargs, deadline, early = reply.value
    assert (cfg, args, kwargs, early) == ("cfg", (1, 2), {"k": 3}, True)
    assert before + 30.0 <= deadline <= time.monotonic() + 30.0
    assert CALL_DEADLINE.get() is None and not EARLY_ALLOWED.get()  # both end with the call
    assert worker._answer((seen, "cfg", (), {}, 30.0)).value[4] is False  # `run`: no early answer


def fails(cfg: Any, exc: BaseException) -> None:
    raise exc


def test_errors_travel_as_their_parts_and_the_worker_ends_when_it_must() -> None:
    error = worker._answer((fails, None, (QueryError("bad", suggestions=["fix"], query_context="q"),), {}, 1.0))
    assert error.status == "error" and not error.recycle
    assert error.value == (QueryError, "bad", ["fix"], None, {}, "q")
    for exc in (MemoryLimit("full"), MemoryError()):  # its memory is not to be trusted any more
        full = worker._answer((fails, None, (exc,), {}, 1.0))
        assert full.status == "error" and full.recycle and full.value[0] is MemoryLimit
    crash = worker._answer((fails, None, (KeyError("a bug"),), {}, 1.0))
    assert crash.status == "crash" and crash.recycle and isinstance(crash.value, KeyError)
