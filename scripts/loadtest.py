#!/usr/bin/env python3
"""Load test (loopback only, bounded in time): N concurrent MCP clients mixing writes and reads across
the enabled families, plus REST traffic, against a freshly started server with an embedded database.

    python scripts/loadtest.py --clients 64 --duration 60 [--workers 2] [--compare 120] [--write-doc]

Reports throughput, p50/p95/p99 per operation, the error count, the server's resident memory at the end
and its CPU per call: over the mixed round, and per operation from a short phase after it in which
every client calls that operation alone (`--cpu-seconds`, 0 skips). Server CPU is read from the server's
own processes (`cairn serve` and its workers, not the embedded PostgreSQL nor this load generator).
`--compare D` runs a second, longer round on a fresh server and compares memory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
import psutil
from bench_mcp import server_processes
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import TextContent

ROOT = Path(__file__).resolve().parents[1]
KEY = "loadtest-key-0123456789abcdef"
WORDS = (
    "alpha beta gamma delta kappa lambda sigma omega river stone forest cloud signal memory graph "
    "vector index query budget sample cache upstream finding record project"
).split()

Args = Callable[[int, random.Random], dict[str, Any]]


def _sentence(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


# (tool, kind, argument factory); a scenario runs only when its tool is served.
SCENARIOS: list[tuple[str, str, Args]] = [
    ("list_projects", "read", lambda i, r: {"limit": 10}),
    ("create_project", "write", lambda i, r: {"name": f"load-{i % 50}"}),
    (
        "push",
        "write",
        lambda i, r: {"text": _sentence(r, 40), "project_id": f"load-{i % 5}", "tags": [r.choice(WORDS)]},
    ),
    ("search", "read", lambda i, r: {"query_text": _sentence(r, 5), "project_id": f"load-{i % 5}"}),
    ("capture_thought", "write", lambda i, r: {"content": _sentence(r, 20)}),
    ("search_thoughts", "read", lambda i, r: {"query": _sentence(r, 4)}),
    (
        "create_entities",
        "write",
        lambda i, r: {
            "entities": [{"name": f"entity-{i % 500}", "entityType": "concept", "observations": [_sentence(r, 8)]}]
        },
    ),
    ("search_nodes", "read", lambda i, r: {"query": r.choice(WORDS)}),
    ("search_semantic", "read", lambda i, r: {"query": _sentence(r, 4)}),
    (
        "analysis_store",
        "write",
        lambda i, r: {"analysis_id": f"load-{i % 8}", "findings": [{"finding": _sentence(r, 15), "category": "note"}]},
    ),
    (
        "analysis_query",
        "read",
        lambda i, r: {"analysis_id": f"load-{i % 8}", "mode": "semantic", "query": _sentence(r, 4)},
    ),
    (
        "execute_query",
        "read",
        lambda i, r: {
            "query_type": "sql",
            "files": ["load.csv"],
            "return_limit": 20,
            "query": f"SELECT word, count(*) AS n, avg(score) AS mean FROM data WHERE score > {r.randint(0, 50)} "
            "GROUP BY word ORDER BY n DESC",
        },
    ),
    ("profile_dataset", "read", lambda i, r: {"file_path": "load.csv", "sample_size": 500}),
]

# Called once before the clock starts so every read has something to find.
SEEDS: list[tuple[str, dict[str, Any]]] = [
    *[
        ("analysis_store", {"analysis_id": f"load-{k}", "findings": [{"finding": "seed finding", "category": "note"}]})
        for k in range(8)
    ],
    *[("push", {"text": "seed memory", "project_id": f"load-{k}"}) for k in range(5)],
]


def _write_dataset(data_dir: str, rows: int = 20_000) -> None:
    """A small CSV under the default datasets root for the analytics scenarios."""
    root = Path(data_dir) / "datasets"
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    lines = ["id,word,score,day"] + [
        f"{n},{rng.choice(WORDS)},{rng.uniform(0, 100):.3f},2026-01-{1 + n % 28:02d}" for n in range(rows)
    ]
    (root / "load.csv").write_text("\n".join(lines) + "\n")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(data_dir: str, port: int, workers: int = 1) -> subprocess.Popen[bytes]:
    """A real `cairn serve` process on loopback with its own embedded database (`workers` processes)."""
    env = {
        **os.environ,
        "CAIRN_DATA_DIR": data_dir,
        "CAIRN_API_KEYS": f"{KEY}:admin",
        "CAIRN_PORT": str(port),
        "CAIRN_LOG_LEVEL": "WARNING",
        "CAIRN_RATE_LIMIT_PER_SECOND": "0",
        "CAIRN_DB_POOL_SIZE": "20",
        "CAIRN_MAX_LONG_JOBS_PER_KEY": "0",
        "CAIRN_WORKERS": str(workers),
    }
    env.pop("CAIRN_DATABASE_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError("server exited during start-up")
        time.sleep(0.5)
    proc.kill()
    raise TimeoutError("server did not become ready")


class Stats:
    """Latencies and errors per operation."""

    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.samples: dict[str, str] = {}

    def record(self, name: str, seconds: float, ok: bool, detail: str = "") -> None:
        self.latency[name].append(seconds)
        if not ok:
            self.errors[name] += 1
            self.samples.setdefault(name, detail[:300])


async def mcp_worker(url: str, wid: int, until: float, scenarios: list[tuple[str, str, Args]], stats: Stats) -> None:
    """One MCP client session calling a random mix of scenarios until the deadline."""
    rng = random.Random(wid)
    headers = {"Authorization": f"Bearer {KEY}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120.0)) as http,
        streamable_http_client(f"{url}/mcp/all", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        i = wid * 100_000
        while time.monotonic() < until:
            name, _, make = rng.choice(scenarios)
            i += 1
            started = time.perf_counter()
            try:
                result = await session.call_tool(name, make(i, rng))
                ok = not result.is_error
                first = result.content[0] if result.content else None
                detail = "" if ok else (first.text if isinstance(first, TextContent) else str(first))
            except Exception as exc:
                ok, detail = False, repr(exc)
            stats.record(f"mcp:{name}", time.perf_counter() - started, ok, detail)


async def rest_worker(url: str, wid: int, until: float, stats: Stats) -> None:
    """REST traffic alongside the MCP clients."""
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as c:
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                r = await c.get("/api/v1/projects", params={"limit": 20})
                ok, detail = r.status_code == 200, r.text
            except Exception as exc:
                ok, detail = False, repr(exc)
            stats.record("rest:list_projects", time.perf_counter() - started, ok, detail)


def server_cpu_seconds(pid: int) -> float:
    """User + system CPU of the server's own processes: `pid` and its descendants but PostgreSQL."""
    total = 0.0
    for process in server_processes(pid):
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def server_rss_mb(pid: int) -> float:
    """Resident memory of the server's own processes (with --workers, the parent and its workers)."""
    total = 0
    for process in server_processes(pid):
        with contextlib.suppress(psutil.Error):
            total += process.memory_info().rss
    return total / 2**20


async def _sample_rss(pid: int, started: float, out: list[tuple[float, float]], every: float = 10.0) -> None:
    """Resident memory of the server every `every` seconds while the load runs."""
    while True:
        out.append((time.monotonic() - started, server_rss_mb(pid)))
        await asyncio.sleep(every)


def _rss_line(result: dict[str, Any]) -> str:
    return "RSS over time (s: MiB): " + ", ".join(f"{t:.0f}: {m:.0f}" for t, m in result["rss_samples"])


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def _call_until(session: ClientSession, name: str, make: Args, wid: int, until: float) -> tuple[int, int]:
    """Call one tool on `session` until the deadline; returns (calls, errors)."""
    rng, i, calls, errors = random.Random(wid), wid * 100_000, 0, 0
    while time.monotonic() < until:
        i += 1
        result = await session.call_tool(name, make(i, rng))
        calls, errors = calls + 1, errors + bool(result.is_error)
    return calls, errors


async def _cpu_per_operation(
    url: str, pid: int, clients: int, scenarios: list[tuple[str, str, Args]], seconds: float
) -> dict[str, dict[str, float]]:
    """Every client calls one operation alone for `seconds` (closed loop), on sessions opened before the
    clock starts; the server's CPU over that phase and the draining of what it queued, divided by its
    calls (so a write's includes embedding its vectors)."""
    headers = {"Authorization": f"Bearer {KEY}"}
    out: dict[str, dict[str, float]] = {}
    async with contextlib.AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120.0)))
        sessions = []
        for _ in range(clients):
            read, write = await stack.enter_async_context(streamable_http_client(f"{url}/mcp/all", http_client=http))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            sessions.append(session)
        await _drain(url)
        for name, _, make in scenarios:
            until = time.monotonic() + seconds
            before = server_cpu_seconds(pid)
            counts = await asyncio.gather(*(_call_until(s, name, make, w, until) for w, s in enumerate(sessions)))
            await _drain(url)  # the vectors this phase queued are part of its cost
            calls, errors = sum(c for c, _ in counts), sum(e for _, e in counts)
            out[name] = {
                "calls": calls,
                "cpu_ms": (server_cpu_seconds(pid) - before) * 1000 / max(calls, 1),
                "errors": errors,
            }
    return out


async def _drain(url: str) -> tuple[int, float]:
    """The embedding queue's depth, then the seconds `wait_for_embeddings` takes to empty it."""
    async with httpx2.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=900) as http:
        health = (await http.get("/api/v1/resources/health")).json()
        started = time.monotonic()
        answer = await http.post("/api/v1/embeddings/wait", json={"timeout_seconds": 600})
        answer.raise_for_status()
        return int(health["embedding_queue"]["depth"]), time.monotonic() - started


async def seed(url: str) -> list[tuple[str, str, Args]]:
    """Seed the data the scenarios read (`SEEDS`, those the server serves); the scenarios it serves."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}) as http,
        streamable_http_client(f"{url}/mcp/all", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        served = {t.name for t in (await session.list_tools()).tools}
        for tool, arguments in SEEDS:
            if tool in served:
                seeded = await session.call_tool(tool, arguments)
                if seeded.is_error:
                    raise RuntimeError(f"seeding {tool} failed: {seeded.content}")
    return [s for s in SCENARIOS if s[0] in served]


async def one_round(
    clients: int, duration: float, rest_clients: int, workers: int = 1, cpu_seconds: float = 0
) -> dict[str, Any]:
    """Start a server, load it, measure, stop it."""
    data_dir = tempfile.mkdtemp(prefix="cairn-load-")
    _write_dataset(data_dir)
    port = _free_port()
    proc = start_server(data_dir, port, workers)
    url = f"http://127.0.0.1:{port}"
    try:
        scenarios = await seed(url)
        stats = Stats()
        until = time.monotonic() + duration
        started = time.monotonic()
        rss_samples: list[tuple[float, float]] = []
        sampler = asyncio.create_task(_sample_rss(proc.pid, started, rss_samples))
        cpu_before = server_cpu_seconds(proc.pid)
        own_before = time.process_time()
        await asyncio.gather(
            *[mcp_worker(url, w, until, scenarios, stats) for w in range(clients)],
            *[rest_worker(url, w, until, stats) for w in range(rest_clients)],
        )
        elapsed = time.monotonic() - started
        cpu_mixed = server_cpu_seconds(proc.pid) - cpu_before
        cpu_generator = time.process_time() - own_before
        sampler.cancel()
        rss = server_rss_mb(proc.pid)
        rss_samples.append((elapsed, rss))
        # What the round left to the embedding queue (its workers give way to calls): drained at once
        # and timed, so the figures can count it.
        backlog, drain_s = await _drain(url)
        cpu_drain = server_cpu_seconds(proc.pid) - cpu_before - cpu_mixed
        cpu_per_op: dict[str, dict[str, float]] = {}
        if cpu_seconds > 0:
            cpu_per_op = await _cpu_per_operation(url, proc.pid, clients, scenarios, cpu_seconds)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    total = sum(len(v) for v in stats.latency.values())
    return {
        "clients": clients,
        "duration": duration,
        "elapsed": elapsed,
        "calls": total,
        "throughput": total / elapsed,
        "errors": sum(stats.errors.values()),
        "rss_mb": rss,
        "workers": workers,
        "cpu_ms_per_call": cpu_mixed * 1000 / max(total, 1),
        "backlog": backlog,
        "drain_s": drain_s,
        "throughput_with_drain": total / (elapsed + drain_s),
        "cpu_ms_per_call_with_drain": (cpu_mixed + cpu_drain) * 1000 / max(total, 1),
        "generator_cpu_ms_per_call": cpu_generator * 1000 / max(total, 1),
        "cpu_per_op": cpu_per_op,
        "scenarios": [s[0] for s in scenarios],
        "rss_samples": rss_samples,
        "per_op": {
            name: {
                "calls": len(v),
                "p50": _pct(v, 0.50),
                "p95": _pct(v, 0.95),
                "p99": _pct(v, 0.99),
                "errors": stats.errors.get(name, 0),
                "median_ms": statistics.median(v) * 1000,
            }
            for name, v in sorted(stats.latency.items())
        },
        "error_samples": dict(stats.samples),
    }


def markdown(first: dict[str, Any], second: dict[str, Any] | None) -> str:
    """The load-test section of docs/benchmarks.md."""
    lines = [
        f"### Load test: {first['clients']} MCP clients + REST traffic, {first['workers']} server worker(s)",
        "",
        f"Round 1: {first['duration']:.0f} s, {first['calls']} calls, "
        f"{first['throughput']:.1f} calls/s, errors {first['errors']}, server RSS {first['rss_mb']:.0f} MiB, "
        f"server CPU {first['cpu_ms_per_call']:.1f} ms per call (the load generator's own: "
        f"{first['generator_cpu_ms_per_call']:.1f} ms per call)",
        "",
        f"The round left {first['backlog']} rows in the embedding queue (its workers give way to calls, at most "
        f"`CAIRN_EMBEDDING_QUEUE_DEFER_SECONDS` behind); draining them took {first['drain_s']:.1f} s. Counting "
        f"that time: {first['throughput_with_drain']:.1f} calls/s, server CPU "
        f"{first['cpu_ms_per_call_with_drain']:.1f} ms per call.",
        "",
        _rss_line(first),
        "",
        "| operation | calls | p50 ms | p95 ms | p99 ms | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in first["per_op"].items():
        lines.append(
            f"| {name} | {row['calls']} | {row['p50']:.1f} | {row['p95']:.1f} | {row['p99']:.1f} | {row['errors']} |"
        )
    if first["cpu_per_op"]:
        lines += [
            "",
            "Server CPU per call, per operation: after the mixed round, every client calls one operation alone "
            "for a few seconds (closed loop, sessions already open); the server's CPU over that phase and the "
            "draining of the vectors it queued, divided by its calls (a write's includes embedding its vectors).",
            "",
            "| operation | calls | server CPU ms per call | errors |",
            "| --- | ---: | ---: | ---: |",
        ]
        for name, row in first["cpu_per_op"].items():
            lines.append(f"| {name} | {row['calls']} | {row['cpu_ms']:.1f} | {row['errors']} |")
    if second is not None:
        lines += [
            "",
            f"Round 2: {second['duration']:.0f} s, {second['calls']} calls, "
            f"{second['throughput']:.1f} calls/s, errors {second['errors']}, server RSS "
            f"{second['rss_mb']:.0f} MiB (round 1: {first['rss_mb']:.0f} MiB; ratio "
            f"{second['rss_mb'] / first['rss_mb']:.2f} for {second['duration'] / first['duration']:.1f}x "
            f"the duration); it left {second['backlog']} rows in the embedding queue, drained in "
            f"{second['drain_s']:.1f} s: {second['throughput_with_drain']:.1f} calls/s counting that time",
            "",
            _rss_line(second),
        ]
    for label, run in (("round 1", first), ("round 2", second)):
        if run is not None and run["error_samples"]:
            lines += ["", f"Error samples, {label}: " + "; ".join(f"{k}: {v}" for k, v in run["error_samples"].items())]
    return "\n".join(lines) + "\n"


# The same markers as scripts/bench.py uses, so `make bench` keeps this section.
BEGIN, END = "<!-- bench:loadtest -->", "<!-- /bench:loadtest -->"


def _record(report: str) -> None:
    """Replace the load-test section of docs/benchmarks.md (kept between two markers)."""
    doc = ROOT / "docs" / "benchmarks.md"
    text = doc.read_text()
    section = (
        f"{BEGIN}\n## Load test (`make loadtest`)\n\nMeasured "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on this machine ({os.cpu_count()} cores, "
        f"{psutil.virtual_memory().total / 2**30:.1f} GiB), load generator and server on the same host. "
        f"Each round starts a fresh server with its own embedded database.\n\n{report}{END}\n"
    )
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    doc.write_text(text)


def main() -> int:
    """Run the load test and print (or record) the report."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--rest-clients", type=int, default=4)
    parser.add_argument("--duration", type=float, default=60)
    parser.add_argument("--compare", type=float, default=0, help="second round duration (memory growth)")
    parser.add_argument("--workers", type=int, default=1, help="server worker processes (cairn serve --workers)")
    parser.add_argument("--cpu-seconds", type=float, default=4, help="per-operation CPU phase length (0: skip)")
    parser.add_argument(
        "--write-doc",
        action="store_true",
        help="record the report in docs/benchmarks.md (replaces the previous load-test section)",
    )
    args = parser.parse_args()
    first = asyncio.run(one_round(args.clients, args.duration, args.rest_clients, args.workers, args.cpu_seconds))
    second = (
        asyncio.run(one_round(args.clients, args.compare, args.rest_clients, args.workers)) if args.compare else None
    )
    report = markdown(first, second)
    print(report)
    if args.write_doc:
        _record(report)
    failed = first["errors"] or sum(r["errors"] for r in first["cpu_per_op"].values())
    return 1 if failed or (second and second["errors"]) else 0


if __name__ == "__main__":
    sys.exit(main())
