"""Graceful shutdown: SIGTERM lets in-flight calls finish and stops the embedded database cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.support.server import free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow  # subprocesses, restarts or generated inputs: seconds per test

ROOT = Path(__file__).resolve().parents[2]


def _stopped_listening(port: int) -> bool:
    """True once nothing accepts connections on 127.0.0.1:`port` (uvicorn closes its socket first
    when it shuts down, then waits for the calls in flight)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except OSError:
        return True


async def test_sigterm_finishes_in_flight_calls_and_stops_postgres() -> None:
    data_dir = tempfile.mkdtemp(prefix="cairn-shutdown-")
    port = free_port()
    env = {
        **os.environ,
        "CAIRN_DATA_DIR": data_dir,
        "CAIRN_DATABASE_URL": "",
        "CAIRN_API_KEYS": "",
        "CAIRN_PORT": str(port),
        "CAIRN_LOG_LEVEL": "WARNING",
    }
    proc = subprocess.Popen(  # noqa: ASYNC220
        [sys.executable, "-m", "tests.support.instrumentation"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=60) as c:
            deadline = time.monotonic() + 90
            while True:
                try:
                    if (await c.get("/healthz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline and proc.poll() is None, "server did not start"
                await asyncio.sleep(0.2)
            started, release = Path(data_dir) / "call-started", Path(data_dir) / "call-release"
            body = {"steps": 3, "delay_ms": 100, "started": str(started), "release": str(release)}
            call = asyncio.create_task(c.post("/api/v1/testing/progress", json=body))
            await eventually(started.exists, what="the call running in the server")
            proc.send_signal(signal.SIGTERM)
            # The server is shutting down with the call in flight (it waits for it): then the call ends.
            await eventually(lambda: _stopped_listening(port), what="the server no longer accepting connections")
            assert not call.done() and proc.poll() is None
            release.touch()
            response = await call
            assert response.status_code == 200 and response.json() == {"ok": True}
        proc.wait(timeout=30)
        assert not (Path(data_dir) / "pgdata" / "postmaster.pid").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
