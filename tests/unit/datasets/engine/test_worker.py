"""app/datasets/engine/worker.py: a worker process ends when its server is gone, however the server
ended."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from app.datasets.engine.pool import SPARE


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
