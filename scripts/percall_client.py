"""The client side of the per-call benchmarks (issue 42), run in a process of its own.

The three `make bench` sections `percall_writes`, `percall_trivial` and `percall_datasets` start the
servers, then run this script as a separate process so the client's CPU neither shares an event loop
with the driver nor is counted with it. The client is the MCP SDK's ``Client`` (over
``streamable_http_client`` with one ``httpx2`` connection, or over stdio for the reference server),
making sequential calls. It prints one JSON object on stdout. ::

    python scripts/percall_client.py writes   '{"url": ..., "entities": 10000}'
    python scripts/percall_client.py writes   '{"stdio": ["node", "index.js"], "env": {...}, "entities": 10000}'
    python scripts/percall_client.py cpu      '{"url": ..., "pids": [123], "warmup": 50, "seconds": 10}'
    python scripts/percall_client.py cpu_ab   '{"urls": [a, b], "pids": [[1], [2]], "windows": 6}'
    python scripts/percall_client.py datasets '{"url": ..., "calls": 200}'
    python scripts/percall_client.py datasets_ab '{"urls": [a, b], "calls": 200}'
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

BATCH = 25
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def entities(start: int, n: int) -> list[dict[str, Any]]:
    """`n` entities from number `start`, two observations each (the workload of issue 12)."""
    return [
        {
            "name": f"node-{i}",
            "entityType": f"kind{i % 7}",
            "observations": [f"node {i} belongs to group {i % 97}", f"created for batch {i // BATCH}"],
        }
        for i in range(start, start + n)
    ]


def relations(start: int, n: int) -> list[dict[str, str]]:
    """`n` relations chaining node-i to node-(i+1) from `start`."""
    return [{"from": f"node-{i}", "to": f"node-{i + 1}", "relationType": "precedes"} for i in range(start, start + n)]


def proc_cpu_seconds(pids: list[int]) -> float:
    """utime + stime of `pids` from ``/proc/<pid>/stat`` (fields 14 and 15), in seconds."""
    ticks = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as fh:
            # The command name (field 2) may hold spaces: split after its closing parenthesis.
            fields = fh.read().rpartition(")")[2].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / CLOCK_TICKS


@asynccontextmanager
async def http_client(key: str | None) -> AsyncIterator[Any]:
    """One ``httpx2`` client holding a single keep-alive connection (with the bearer `key`, if any)."""
    import httpx2

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    limits = httpx2.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(600.0), limits=limits) as http:
        yield http


def mcp_client(url: str, http: Any) -> Any:
    """The SDK's ``Client`` on the streamable HTTP endpoint `url` through `http`."""
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    return Client(streamable_http_client(url, http_client=http))


async def ok(client: Any, tool: str, args: dict[str, Any]) -> Any:
    """Call `tool`; raise if the server answered with an error."""
    res = await client.call_tool(tool, args)
    if res.is_error:
        raise RuntimeError(f"{tool} failed: {res.content[0].text[:300]}")
    return res


async def _writes_on(client: Any, n: int) -> dict[str, float]:
    t0 = time.perf_counter()
    for i in range(0, n, BATCH):
        await ok(client, "create_entities", {"entities": entities(i, min(BATCH, n - i))})
    t1 = time.perf_counter()
    for i in range(0, n - 1, BATCH):
        await ok(client, "create_relations", {"relations": relations(i, min(BATCH, n - 1 - i))})
    t2 = time.perf_counter()
    return {"entities_s": t1 - t0, "relations_s": t2 - t1, "writes_s": t2 - t0}


async def writes(spec: dict[str, Any]) -> dict[str, float]:
    """The graph writes workload on the server of `spec` (``url`` + ``key``, or ``stdio`` + ``env``)."""
    n = int(spec["entities"])
    if "stdio" in spec:
        from mcp.client import Client
        from mcp.client.stdio import StdioServerParameters

        command, *args = spec["stdio"]
        params = StdioServerParameters(command=command, args=args, env=spec.get("env"))
        async with Client(params) as client:
            return await _writes_on(client, n)
    async with http_client(spec.get("key")) as http, mcp_client(spec["url"], http) as client:
        return await _writes_on(client, n)


async def cpu(spec: dict[str, Any]) -> dict[str, float]:
    """Server CPU per trivial call: `warmup` calls, then sequential calls for `seconds`, reading the
    server processes' CPU from /proc before and after."""
    tool, args = spec.get("tool", "list_projects"), spec.get("args", {})
    pids = [int(p) for p in spec["pids"]]
    async with http_client(spec.get("key")) as http, mcp_client(spec["url"], http) as client:
        for _ in range(int(spec.get("warmup", 50))):
            await ok(client, tool, args)
        latencies: list[float] = []
        cpu0, t0 = proc_cpu_seconds(pids), time.perf_counter()
        end = t0 + float(spec.get("seconds", 10.0))
        while time.perf_counter() < end:
            started = time.perf_counter()
            await ok(client, tool, args)
            latencies.append(time.perf_counter() - started)
        wall, used = time.perf_counter() - t0, proc_cpu_seconds(pids) - cpu0
    return {
        "calls": len(latencies),
        "wall_s": wall,
        "server_cpu_s": used,
        "cpu_ms_per_call": used * 1000 / len(latencies),
        "p50_ms": statistics.median(latencies) * 1000,
    }


async def cpu_ab(spec: dict[str, Any]) -> dict[str, Any]:
    """Two servers side by side under the same load: the trivial call alternately on ``urls[0]`` and
    ``urls[1]`` (each over its own connection), each server's CPU per call over `windows` windows of
    `seconds` after `warmup` calls each (``pids``: one list per server)."""
    tool, args = spec.get("tool", "list_projects"), spec.get("args", {})
    pids: list[list[int]] = spec["pids"]
    async with (
        http_client(spec.get("key")) as h0,
        http_client(spec.get("key")) as h1,
        mcp_client(spec["urls"][0], h0) as c0,
        mcp_client(spec["urls"][1], h1) as c1,
    ):
        for _ in range(int(spec.get("warmup", 50))):
            await ok(c0, tool, args)
            await ok(c1, tool, args)
        windows = []
        for _ in range(int(spec.get("windows", 6))):
            before, n = [proc_cpu_seconds(p) for p in pids], 0
            end = time.perf_counter() + float(spec.get("seconds", 10.0))
            while time.perf_counter() < end:
                for client in (c0, c1) if n % 2 == 0 else (c1, c0):
                    await ok(client, tool, args)
                n += 1
            after = [proc_cpu_seconds(p) for p in pids]
            windows.append(
                {"calls": n, "cpu_ms_per_call": [(b - a) * 1000 / n for a, b in zip(before, after, strict=True)]}
            )
    return {"windows": windows}


def query(i: int) -> dict[str, Any]:
    """A 1-row aggregate over the CSV whose text differs with `i`, so the results cache misses."""
    return {"query_type": "sql", "query": f"SELECT count(*) + {i} AS n FROM data", "files": ["floor.csv"]}


async def _alternating(
    data: Any, projects: Any, queries: Callable[[int], dict[str, Any]], calls: int, warmup: int
) -> dict[str, float]:
    """`execute_query` of `queries(i)` and `list_projects`, alternating, sequential; median round
    trips (ms) of each after the warm-up."""
    times: dict[str, list[float]] = {"execute_query": [], "list_projects": []}
    for i in range(warmup + calls):
        for tool in ("execute_query", "list_projects"):
            client, args = (data, queries(i)) if tool == "execute_query" else (projects, {})
            started = time.perf_counter()
            await ok(client, tool, args)
            if i >= warmup:
                times[tool].append(time.perf_counter() - started)
    return {tool: statistics.median(values) * 1000 for tool, values in times.items()}


async def datasets(spec: dict[str, Any]) -> dict[str, Any]:
    """Alternating `execute_query` (on /mcp/datasets) and `list_projects` (on /mcp/projects) over one
    HTTP connection, sequential; median round trips of each after a warm-up. Then the same with one
    query asked again and again (answered from the results cache after its first call)."""
    calls, warmup = int(spec.get("calls", 200)), int(spec.get("warmup", 20))
    url = spec["url"]
    async with (
        http_client(spec.get("key")) as http,
        mcp_client(f"{url}/mcp/datasets", http) as data,
        mcp_client(f"{url}/mcp/projects", http) as projects,
    ):
        varied = await _alternating(data, projects, query, calls, warmup)
        repeated = await _alternating(data, projects, lambda _: query(-1), calls, warmup)
    return {
        "calls": calls,
        "execute_query_p50_ms": varied["execute_query"],
        "list_projects_p50_ms": varied["list_projects"],
        "ratio": varied["execute_query"] / varied["list_projects"],
        "repeated_p50_ms": repeated["execute_query"],
        "repeated_list_projects_p50_ms": repeated["list_projects"],
        "repeated_ratio": repeated["execute_query"] / repeated["list_projects"],
    }


async def datasets_ab(spec: dict[str, Any]) -> dict[str, Any]:
    """`datasets` on two servers side by side (``urls``, each over its own connection): every step
    calls each server in turn (the order alternating), so both see the same load; each server's
    medians and ratio."""
    calls, warmup = int(spec.get("calls", 200)), int(spec.get("warmup", 20))
    async with (
        http_client(spec.get("key")) as h0,
        http_client(spec.get("key")) as h1,
        mcp_client(f"{spec['urls'][0]}/mcp/datasets", h0) as d0,
        mcp_client(f"{spec['urls'][0]}/mcp/projects", h0) as p0,
        mcp_client(f"{spec['urls'][1]}/mcp/datasets", h1) as d1,
        mcp_client(f"{spec['urls'][1]}/mcp/projects", h1) as p1,
    ):
        servers = [(d0, p0), (d1, p1)]
        times: list[dict[str, list[float]]] = [{"execute_query": [], "list_projects": []} for _ in servers]
        for i in range(warmup + calls):
            for tool in ("execute_query", "list_projects"):
                for n in (0, 1) if i % 2 == 0 else (1, 0):
                    client, args = (servers[n][0], query(i)) if tool == "execute_query" else (servers[n][1], {})
                    started = time.perf_counter()
                    await ok(client, tool, args)
                    if i >= warmup:
                        times[n][tool].append(time.perf_counter() - started)
    out = []
    for t in times:
        eq, lp = statistics.median(t["execute_query"]) * 1000, statistics.median(t["list_projects"]) * 1000
        out.append({"execute_query_p50_ms": eq, "list_projects_p50_ms": lp, "ratio": eq / lp})
    return {"calls": calls, "servers": out}


MODES = {"writes": writes, "cpu": cpu, "cpu_ab": cpu_ab, "datasets": datasets, "datasets_ab": datasets_ab}


def main() -> None:
    """Command line entry point: ``percall_client.py MODE JSON-SPEC``; prints the figures as JSON."""
    mode, spec = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(asyncio.run(MODES[mode](spec))), flush=True)


if __name__ == "__main__":
    main()
