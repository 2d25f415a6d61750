"""Shared driver parts of the per-call sections (`bench_percall_*.py`, issue 42).

Each section starts its servers here and runs the client (`percall_client.py`) in a process of its
own, one connection, sequential calls. Cairn is ``cairn serve`` with default settings except the bench
key and ``CAIRN_RATE_LIMIT_PER_SECOND=0`` (`bench_mcp.Server`: its own data directory and embedded
PostgreSQL); the bare SDK is `bare_mcp_app.py` (a verbatim copy of the peers' app: an ``MCPServer``
with one trivial tool, stateless streamable HTTP) under uvicorn.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
for p in (ROOT, SCRIPTS):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench_mcp import KEY, SETTLE_SECONDS, Server, _free_port, lexical_index_caught_up, server_processes  # noqa: E402


def run_client(mode: str, spec: dict[str, Any], timeout: float = 3600.0) -> dict[str, Any]:
    """Run `percall_client.py MODE SPEC` in its own process and return its JSON figures."""
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "percall_client.py"), mode, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {mode} client failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@contextlib.contextmanager
def cairn(env: dict[str, str] | None = None, before_start: Any = None, root: Path = ROOT) -> Iterator[Server]:
    """A started ``cairn serve`` of the checkout `root` (`env` adds settings; `before_start(server)` may
    put files in its data directory first), stopped after the block."""
    srv = Server(root, 1, env)
    try:
        if before_start is not None:
            before_start(srv)
        srv.start()
        time.sleep(SETTLE_SECONDS)  # background start-up work (the queue's first sweep) ends
        yield srv
    finally:
        srv.stop()


def lexical_caught_up(srv: Server, timeout: float = 600.0) -> float:
    """Seconds until the server's lexical mover has caught up (`bench_mcp.lexical_index_caught_up`),
    polled on the server's embedded PostgreSQL."""
    import asyncio

    import asyncpg

    lines = (srv.data / "pgdata" / "postmaster.pid").read_text().splitlines()
    port, socket_dir = int(lines[3]), lines[4]

    async def wait() -> float:
        conn = await asyncpg.connect(host=socket_dir, port=port, user="postgres", database="cairn")
        try:
            return await lexical_index_caught_up(conn, timeout)
        finally:
            await conn.close()

    return asyncio.run(wait())


def cairn_pids(srv: Server) -> list[int]:
    """The serve process and its own children (not PostgreSQL's)."""
    assert srv.proc is not None
    return [p.pid for p in server_processes(srv.proc.pid)]


@contextlib.contextmanager
def bare_sdk(timeout: float = 60.0) -> Iterator[tuple[str, int]]:
    """`bare_mcp_app:app` under uvicorn on a free port: (its /mcp URL, its pid), stopped after the block."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "bare_mcp_app:app", "--port", str(port), "--log-level", "warning"],
        cwd=SCRIPTS,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError("the bare SDK app exited during start-up")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the bare SDK app did not listen in time")
            time.sleep(0.1)
        time.sleep(SETTLE_SECONDS)
        yield f"http://127.0.0.1:{port}/mcp", proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def alternate(
    name: str, rounds: int, sides: tuple[str, str], measure_side: Callable[[str], dict[str, Any]]
) -> list[dict[str, Any]]:
    """`rounds` rounds of `measure_side(side)` for both `sides`, the first side going first in odd
    rounds and second in even ones; each round a dict of the load at its start and each side's figures."""
    out = []
    for number in range(rounds):
        row: dict[str, Any] = {"load": load()}
        for side in sides if number % 2 == 0 else sides[::-1]:
            print(f"{name}: round {number + 1}/{rounds}, {side}", file=sys.stderr, flush=True)
            row[side] = measure_side(side)
        out.append(row)
    return out


def load() -> str:
    """The load average (1/5/15 min) now."""
    return " / ".join(f"{v:.2f}" for v in os.getloadavg())


def median(values: list[float]) -> float:
    """The median of `values`."""
    return float(statistics.median(values))


__all__ = ["KEY", "Server", "alternate", "bare_sdk", "cairn", "cairn_pids", "load", "median", "run_client"]
