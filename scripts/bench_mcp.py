"""Benchmark trivial calls against a real Cairn server: MCP `tools/call` over streamable HTTP and the
REST twin, with the server's CPU per call and calls/s per worker count.

Starts `cairn serve` on a free loopback port (temporary data directory with the embedded PostgreSQL, one
static admin key, ``--workers N``), then calls the trivial read ``list_projects``:

* over MCP, through real MCP client sessions (the SDK's ``ClientSession`` over ``streamable_http_client``
  on ``/mcp/all``);
* over REST, ``GET /api/v1/projects`` with httpx (one keep-alive connection per client);

with 1 client (sequential calls) and 32 concurrent clients sharing a fixed number of calls (1000;
``quick``: 50) after a short warm-up. Latency is the client-side round trip. **Server CPU per call** is
read from the server's own processes (``/proc`` through psutil: the ``cairn serve`` process and its
workers, not the embedded PostgreSQL nor this load generator) before and after the timed calls.

``--compare DIR`` runs the same measurements side by side in one run against another checkout of Cairn
(e.g. ``git worktree add /tmp/before HEAD~1``), alternating the two servers for ``--rounds`` rounds, and
prints the medians::

    python scripts/bench_mcp.py [--quick] [--workers 1,2] [--compare DIR --rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import psutil
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parent.parent
KEY = "bench-mcp-key-0123456789abcdef"
TOOL = "list_projects"
REST_PATH = "/api/v1/projects"
TRANSPORTS = ("mcp", "rest")
CONCURRENCY = (1, 32)
WORKERS = (1, 2)
CALLS = 1000
SETTLE_SECONDS = 3.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cairn(root: Path) -> list[str]:
    """The command that starts Cairn from the checkout `root`: `python -m app` run in `root`, which then
    imports `root/app`, with the interpreter of `root`'s own `.venv` when it has one (its dependencies
    may differ), else this one. Never a console script: it imports the checkout its venv was installed
    from, so a venv shared by two checkouts (a symlink) would run the same code on both sides."""
    own = root / ".venv" / "bin" / "python"
    return [str(own) if own.exists() else sys.executable, "-m", "app"]


def server_processes(pid: int) -> list[psutil.Process]:
    """The server's own processes: `pid` (a `cairn serve` process) and its descendants (workers),
    without the embedded PostgreSQL's."""
    try:
        top = psutil.Process(pid)
        found = [top, *top.children(recursive=True)]
    except psutil.Error:
        return []
    own = []
    for p in found:
        try:
            if not p.name().startswith(("postgres", "pg_ctl")):
                own.append(p)
        except psutil.Error:
            continue
    return own


class Server:
    """A `cairn serve` subprocess on 127.0.0.1 with its own data directory.

    `root` is the checkout to run (default: this one); `workers` > 1 adds ``--workers N``; `env` adds or
    overrides settings (``CAIRN_*``)."""

    def __init__(self, root: Path = ROOT, workers: int = 1, env: dict[str, str] | None = None) -> None:
        self.root = root
        self.workers = workers
        self.extra_env = dict(env or {})
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data = Path(tempfile.mkdtemp(prefix="cairn-bench-mcp-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180.0) -> None:
        """Start the server and wait until /readyz answers 200."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
        # The per-key rate limiter is switched off: this measures the server, not the limiter.
        env.update(
            {
                "CAIRN_DATA_DIR": str(self.data),
                "CAIRN_API_KEYS": f"{KEY}:admin",
                "CAIRN_LOG_LEVEL": "WARNING",
                "CAIRN_RATE_LIMIT_PER_SECOND": "0",
                **self.extra_env,
            }
        )
        workers = ["--workers", str(self.workers)] if self.workers > 1 else []
        self.log = (self.data / "server.log").open("wb")
        self.proc = subprocess.Popen(
            [*_cairn(self.root), "serve", "--host", "127.0.0.1", "--port", str(self.port), *workers],
            cwd=self.root,
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
                    if answer.status == 200 and self._workers_ready():
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"cairn was not ready after {timeout:.0f} s:\n{self._tail()}")

    def _workers_ready(self) -> bool:
        """With several workers: every worker has answered /healthz (its `pid`)."""
        if self.workers == 1:
            return True
        pids = set()
        for _ in range(20 * self.workers):
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=5) as answer:
                pids.add(json.loads(answer.read()).get("pid"))
        return len(pids) >= self.workers

    def _processes(self) -> list[psutil.Process]:
        return server_processes(self.proc.pid) if self.proc is not None else []

    def cpu_seconds(self) -> float | None:
        """User + system CPU time used so far by the server's own processes, else None."""
        total = 0.0
        seen = False
        for p in self._processes():
            try:
                times = p.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
            seen = True
        return total if seen else None

    def _tail(self) -> str:
        return (self.data / "server.log").read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        """SIGTERM the server (then SIGKILL after 40 s) and remove its data directory."""
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


@contextmanager
def on_embedded_postgres(
    env: dict[str, str], prefix: str = "cairn-bench-", root: Path = ROOT
) -> Iterator[tuple[Server, str]]:
    """A started `cairn serve` of the checkout `root` (see `Server`, with `env`) on an embedded
    PostgreSQL started here, and the libpq DSN of its database (for samplers); both are stopped and
    removed after the block."""
    from app.core.pgembedded import start_embedded

    place = Path(tempfile.mkdtemp(prefix=prefix))
    pg = start_embedded(place / "pg")
    srv: Server | None = None
    try:
        pg.ensure_database("bench")
        srv = Server(root, env={"CAIRN_DATABASE_URL": pg.url("bench"), **env})
        srv.start()
        yield srv, pg.libpq_uri("bench")
    finally:
        with contextlib.suppress(Exception):
            if srv is not None:
                srv.stop()
        with contextlib.suppress(Exception):
            pg.stop()
        shutil.rmtree(place, ignore_errors=True)


async def lexical_index_caught_up(conn: Any, timeout: float = 900.0) -> float:
    """Seconds until the lexical mover has copied every listed graph entity into the side table of their
    lexical index (graph_0006; 0 on a schema without one), polled on `conn` (asyncpg)."""
    if await conn.fetchval("SELECT to_regclass('graph_entity_lexical_pending')") is None:
        return 0.0
    t0 = time.perf_counter()
    while await conn.fetchval("SELECT EXISTS (SELECT 1 FROM graph_entity_lexical_pending)"):
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError("the lexical mover did not catch up")
        await asyncio.sleep(0.1)
    return time.perf_counter() - t0


async def longest_idle_in_transaction(dsn: str, stop: asyncio.Event, every: float) -> float:
    """Until `stop` is set, read `pg_stat_activity` every `every` seconds and return the longest time
    (seconds) any of the server's connections (application `cairn`) stayed `idle in transaction`."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    longest = 0.0
    try:
        while not stop.is_set():
            value = await conn.fetchval(
                "SELECT coalesce(max(extract(epoch FROM now() - state_change)), 0) FROM pg_stat_activity "
                "WHERE state = 'idle in transaction' AND application_name = 'cairn'"
            )
            longest = max(longest, float(value))
            await asyncio.sleep(every)
    finally:
        await conn.close()
    return longest


@asynccontextmanager
async def session(url: str) -> AsyncIterator[ClientSession]:
    """A real MCP client session over streamable HTTP with the bench key."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=httpx2.Timeout(60.0)) as http:
        async with streamable_http_client(f"{url}/mcp/all", http_client=http) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                yield client


@asynccontextmanager
async def _caller(url: str, transport: str) -> AsyncIterator[Callable[[], Any]]:
    """A zero-argument coroutine function making one trivial call; it returns True on success."""
    if transport == "mcp":
        async with session(url) as client:

            async def mcp_call() -> bool:
                return not (await client.call_tool(TOOL, {})).is_error

            yield mcp_call
        return
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http:

        async def rest_call() -> bool:
            return (await http.get(REST_PATH)).status_code == 200

        yield rest_call


def _pct(ordered: list[float], p: float) -> float:
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1000


async def _measure(
    url: str, clients: int, calls: int, cpu: Callable[[], float | None] | None = None, transport: str = "mcp"
) -> dict[str, Any]:
    """`calls` trivial calls shared by `clients` concurrent clients (clients are opened and warmed up
    first; only the calls are timed). `cpu` reads the server's CPU seconds."""
    latencies: list[float] = []
    errors = 0
    remaining = calls
    ready = asyncio.Event()
    opened = finished = 0
    marks: dict[str, float | None] = {}

    async def worker() -> None:
        nonlocal remaining, errors, opened, finished
        async with _caller(url, transport) as call:
            for _ in range(3):  # warm-up
                await call()
            opened += 1
            if opened == clients:
                marks["cpu0"] = cpu() if cpu else None
                marks["t0"] = time.perf_counter()
                ready.set()
            await ready.wait()
            while remaining > 0:
                remaining -= 1
                started = time.perf_counter()
                ok = await call()
                latencies.append(time.perf_counter() - started)
                if not ok:
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
        "transport": transport,
        "clients": clients,
        "calls": len(latencies),
        "errors": errors,
        "seconds": wall,
        "per_s": len(latencies) / wall,
        "p50_ms": _pct(ordered, 50),
        "p95_ms": _pct(ordered, 95),
        "server_cpu_ms": (cpu1 - cpu0) * 1000 / len(latencies) if cpu0 is not None and cpu1 is not None else None,
    }


def measure(
    url: str, quick: bool = False, cpu: Callable[[], float | None] | None = None, transports: tuple[str, ...] = ("mcp",)
) -> list[dict[str, Any]]:
    """Every configuration (transport x concurrency) against a running server at `url`; `cpu` reads the
    server's CPU seconds."""
    calls = 50 if quick else CALLS

    async def all_runs() -> list[dict[str, Any]]:
        for transport in transports:  # warm-up, not reported: lazy imports, statement caches
            await _measure(url, 1, 10 if quick else 100, None, transport)
        return [
            await _measure(url, clients, calls, cpu, transport) for transport in transports for clients in CONCURRENCY
        ]

    return asyncio.run(all_runs())


def measure_server(root: Path, workers: int, quick: bool) -> list[dict[str, Any]]:
    """Start a server from checkout `root` with `workers` processes, measure both transports, stop it."""
    server = Server(root, workers)
    try:
        server.start()
        time.sleep(SETTLE_SECONDS)  # background start-up work (e.g. the embedding queue's sweep) ends
        rows = measure(server.url, quick, server.cpu_seconds, TRANSPORTS)
    finally:
        server.stop()
    for row in rows:
        row["workers"] = workers
    return rows


def _cpu(value: Any) -> str:
    return f"{value:.2f}" if value is not None else "n/a"


def markdown(rows: list[dict[str, Any]], quick: bool) -> str:
    """The results as a markdown section."""
    lines = [
        "## MCP tools/call round trip",
        "",
        f"`{TOOL}` (a trivial read: one small query on the projects table, plus its count) with a bearer key, "
        "over MCP (`tools/call` on `/mcp/all` through real MCP SDK client sessions, `ClientSession` + "
        f"`streamable_http_client`, stateless streamable HTTP) and over REST (`GET {REST_PATH}`, httpx, one "
        "keep-alive connection per client), against `cairn serve --workers N` (uvicorn, embedded PostgreSQL) on "
        "127.0.0.1; clients and server share the machine; per-key rate limiting off. "
        f"{rows[0]['calls']} calls per configuration after 100 warm-up calls per transport and 3 per client"
        + (" (quick run)" if quick else "")
        + ". The MCP client sends no progress token, so with the default `CAIRN_MCP_JSON_RESPONSE=auto` each "
        "call is answered with one JSON body rather than an SSE stream. Server CPU per call is read from the "
        "server's own processes (`/proc`: the serve process and its workers, not PostgreSQL nor the load "
        "generator).",
        "",
        "| workers | transport | clients | calls | calls/s | p50 ms | p95 ms | server CPU ms/call | errors |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r.get('workers', 1)} | {r['transport']} | {r['clients']} | {r['calls']} | {r['per_s']:.0f} | "
            f"{r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {_cpu(r.get('server_cpu_ms'))} | {r['errors']} |"
        )
    lines += [
        "",
        "One server process runs on one event loop, so it tops out near 1000 / (server CPU ms per call) "
        "calls/s whatever the number of clients; `--workers N` runs N processes on one host (one embedded "
        "PostgreSQL), and more throughput beyond the host's cores comes from more replicas behind a load "
        "balancer (the server is stateless). On a 2-core machine the load generator competes with the "
        "workers for the same cores.",
    ]
    if any(r["errors"] for r in rows):
        lines += ["", "**Some calls returned errors: these figures are not valid.**"]
    return "\n".join(lines) + "\n"


def run(quick: bool = False, workers: tuple[int, ...] = WORKERS) -> str:
    """Start a server per worker count, measure, stop it; return the markdown section."""
    rows = [row for count in workers for row in measure_server(ROOT, count, quick)]
    return markdown(rows, quick)


def compare(other: Path, rounds: int, quick: bool, workers: tuple[int, ...] = WORKERS) -> str:
    """Side by side in one run: `other` (a checkout of earlier code, one worker) and this checkout (each
    worker count), alternating for `rounds` rounds; the medians as a markdown table."""
    runs: list[tuple[str, Path, int]] = [("before", other, 1), *(("after", ROOT, w) for w in workers)]
    results: dict[tuple[str, int, str, int], list[dict[str, Any]]] = {}
    for number in range(rounds):
        order = runs if number % 2 == 0 else runs[::-1]
        for label, root, count in order:
            print(f"round {number + 1}/{rounds}: {label}, {count} worker(s)", file=sys.stderr, flush=True)
            for row in measure_server(root, count, quick):
                results.setdefault((label, count, row["transport"], row["clients"]), []).append(row)
    lines = [
        f"Side by side, {rounds} round(s) alternating the servers, medians (server CPU ms/call | calls/s | "
        f"p50 ms); `before` = {other}, `after` = {ROOT}:",
        "",
        "| transport | clients | before, 1 worker | " + " | ".join(f"after, {w} worker(s)" for w in workers) + " |",
        "| --- | ---: | --- | " + " | ".join("---" for _ in workers) + " |",
    ]

    def cell(key: tuple[str, int, str, int]) -> str:
        rows = results.get(key, [])
        if not rows:
            return "n/a"
        cpus = [r["server_cpu_ms"] for r in rows if r["server_cpu_ms"] is not None]
        errors = sum(r["errors"] for r in rows)
        text = (
            f"{_cpu(statistics.median(cpus) if cpus else None)} | "
            f"{statistics.median(r['per_s'] for r in rows):.0f} | {statistics.median(r['p50_ms'] for r in rows):.1f}"
        )
        return text.replace(" | ", " / ") + (f" ({errors} errors)" if errors else "")

    for transport in TRANSPORTS:
        for clients in CONCURRENCY:
            cells = [
                cell(("before", 1, transport, clients)),
                *(cell(("after", w, transport, clients)) for w in workers),
            ]
            lines.append(f"| {transport} | {clients} | " + " | ".join(cells) + " |")
    raw = ["", "Every run (server CPU ms/call):", ""]
    for key, rows in sorted(results.items()):
        raw.append(
            f"- {key[0]}, {key[1]} worker(s), {key[2]}, {key[3]} client(s): "
            + ", ".join(_cpu(r["server_cpu_ms"]) for r in rows)
        )
    return "\n".join(lines + raw) + "\n"


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description="Benchmark trivial MCP and REST calls (server CPU per call).")
    parser.add_argument("--quick", action="store_true", help="50 calls per configuration instead of 1000")
    parser.add_argument("--workers", default=",".join(map(str, WORKERS)), help="worker counts, e.g. 1,2")
    parser.add_argument("--compare", type=Path, help="another Cairn checkout to measure side by side (1 worker)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the side-by-side comparison")
    args = parser.parse_args()
    workers = tuple(int(w) for w in args.workers.split(",") if w.strip())
    if args.compare is not None:
        print(compare(args.compare.resolve(), args.rounds, args.quick, workers))
    else:
        print(run(args.quick, workers))


if __name__ == "__main__":
    main()
