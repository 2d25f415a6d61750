"""Benchmark MCP `tools/call` round trips over streamable HTTP against a real Cairn server.

Starts `cairn serve` on a free loopback port (temporary data directory with the embedded PostgreSQL, one
static admin key), then calls the trivial read tool ``list_projects`` through real MCP client sessions
(the SDK's ``ClientSession`` over ``streamable_http_client``):

* 1 client: sequential calls on one session;
* 32 clients: 32 sessions calling concurrently, sharing a fixed number of calls.

Each configuration makes a bounded number of calls (1000; ``quick``: 50) after a short warm-up.
Latency is the client-side round trip of one ``tools/call``. Usage::

    python scripts/bench_mcp.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parent.parent
KEY = "bench-mcp-key-0123456789abcdef"
TOOL = "list_projects"
CONCURRENCY = (1, 32)
CALLS = 1000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cairn() -> list[str]:
    """The command that starts Cairn (the console script next to this interpreter, else the module)."""
    script = Path(sys.executable).parent / "cairn"
    return [str(script)] if script.exists() else [sys.executable, "-m", "app"]


class Server:
    """A `cairn serve` subprocess on 127.0.0.1 with its own data directory."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data = Path(tempfile.mkdtemp(prefix="cairn-bench-mcp-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180.0) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
        # The per-key rate limiter is switched off: this measures the server, not the limiter.
        env.update(
            {
                "CAIRN_DATA_DIR": str(self.data),
                "CAIRN_API_KEYS": f"{KEY}:admin",
                "CAIRN_LOG_LEVEL": "WARNING",
                "CAIRN_RATE_LIMIT_PER_SECOND": "0",
            }
        )
        self.log = (self.data / "server.log").open("wb")
        self.proc = subprocess.Popen(
            [*_cairn(), "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"cairn exited during start-up:\n{self._tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"cairn was not ready after {timeout:.0f} s:\n{self._tail()}")

    def cpu_seconds(self) -> float | None:
        """User + system CPU time used by the server process so far (Linux), else None."""
        try:
            fields = Path(f"/proc/{self.proc.pid if self.proc else 0}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    def _tail(self) -> str:
        return (self.data / "server.log").read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if hasattr(self, "log"):
            self.log.close()
        shutil.rmtree(self.data, ignore_errors=True)


@asynccontextmanager
async def session(url: str) -> AsyncIterator[ClientSession]:
    """A real MCP client session over streamable HTTP with the bench key."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=httpx2.Timeout(60.0)) as http:
        async with streamable_http_client(f"{url}/mcp/all", http_client=http) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                yield client


def _pct(ordered: list[float], p: float) -> float:
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1000


async def _measure(url: str, clients: int, calls: int, cpu: Callable[[], float | None] | None = None) -> dict[str, Any]:
    """`calls` tool calls shared by `clients` concurrent sessions (sessions are opened and warmed up
    first; only the calls are timed). `cpu` reads the server's CPU seconds."""
    latencies: list[float] = []
    errors = 0
    remaining = calls
    ready = asyncio.Event()
    opened = finished = 0
    marks: dict[str, float | None] = {}

    async def worker() -> None:
        nonlocal remaining, errors, opened, finished
        async with session(url) as client:
            for _ in range(3):  # warm-up
                await client.call_tool(TOOL, {})
            opened += 1
            if opened == clients:
                marks["cpu0"] = cpu() if cpu else None
                marks["t0"] = time.perf_counter()
                ready.set()
            await ready.wait()
            while remaining > 0:
                remaining -= 1
                started = time.perf_counter()
                result = await client.call_tool(TOOL, {})
                latencies.append(time.perf_counter() - started)
                if result.is_error:
                    errors += 1
            finished += 1
            if finished == clients:
                marks["t1"] = time.perf_counter()
                marks["cpu1"] = cpu() if cpu else None

    await asyncio.gather(*(worker() for _ in range(clients)))
    wall = float(marks["t1"] or 0) - float(marks["t0"] or 0)
    ordered = sorted(latencies)
    cpu0, cpu1 = marks.get("cpu0"), marks.get("cpu1")
    return {
        "clients": clients,
        "calls": len(latencies),
        "errors": errors,
        "seconds": wall,
        "per_s": len(latencies) / wall,
        "p50_ms": _pct(ordered, 50),
        "p95_ms": _pct(ordered, 95),
        "server_cpu_ms": (cpu1 - cpu0) * 1000 / len(latencies) if cpu0 is not None and cpu1 is not None else None,
    }


def measure(url: str, quick: bool = False, cpu: Callable[[], float | None] | None = None) -> list[dict[str, Any]]:
    """Both configurations against a running server at `url`; `cpu` reads the server's CPU seconds."""
    calls = 50 if quick else CALLS

    async def all_runs() -> list[dict[str, Any]]:
        return [await _measure(url, clients, calls, cpu) for clients in CONCURRENCY]

    return asyncio.run(all_runs())


def markdown(rows: list[dict[str, Any]], quick: bool) -> str:
    """The results as a markdown section."""
    lines = [
        "## MCP tools/call round trip",
        "",
        f"`tools/call {TOOL}` (a trivial read: one small query on the projects table) over streamable HTTP "
        "with a bearer key, "
        "through real MCP SDK client sessions (`ClientSession` + `streamable_http_client`) against one "
        "`cairn serve` process (uvicorn, stateless MCP, embedded PostgreSQL) on 127.0.0.1; clients and server "
        f"share the machine; per-key rate limiting off. {rows[0]['calls']} calls per configuration after 3 "
        "warm-up calls per session" + (" (quick run)" if quick else "") + ".",
        "",
        "| concurrent clients | calls | calls/s | p50 ms | p95 ms | server CPU ms/call | errors |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        cpu = f"{r['server_cpu_ms']:.1f}" if r.get("server_cpu_ms") is not None else "n/a"
        lines.append(
            f"| {r['clients']} | {r['calls']} | {r['per_s']:.0f} | {r['p50_ms']:.1f} | "
            f"{r['p95_ms']:.1f} | {cpu} | {r['errors']} |"
        )
    lines += [
        "",
        "One server process runs on one event loop, so it tops out near 1000 / (server CPU ms per call) "
        "calls/s whatever the number of clients; more throughput comes from more replicas behind a load "
        "balancer (the server is stateless), not from more concurrent clients.",
    ]
    if any(r["errors"] for r in rows):
        lines += ["", "**Some calls returned errors: these figures are not valid.**"]
    return "\n".join(lines) + "\n"


def run(quick: bool = False) -> str:
    """Start a server, measure, stop it; return the markdown section."""
    server = Server()
    try:
        server.start()
        rows = measure(server.url, quick, server.cpu_seconds)
    finally:
        server.stop()
    return markdown(rows, quick)


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description="Benchmark MCP tools/call round trips.")
    parser.add_argument("--quick", action="store_true", help="50 calls per configuration instead of 1000")
    print(run(parser.parse_args().quick))


if __name__ == "__main__":
    main()
