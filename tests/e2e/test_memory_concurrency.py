"""50 concurrent pushes and searches from separate clients (REST and MCP): nothing is lost, nothing is
duplicated, even when two clients push the same text at the same time."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.support.memory import api
from tests.support.server import ADMIN_KEY, RunningServer, mcp_client
from tests.support.waiting import eventually

UNIQUE = 30


def text_of(i: int) -> str:
    return f"Field report {i}: sensor {i * 7} on ridge {i % 5} measured {i * 1.5:.1f} millimetres of rain."


async def test_fifty_concurrent_clients(server: RunningServer, rest: httpx.AsyncClient) -> None:
    jobs: list[tuple[str, str, dict[str, Any]]] = []
    for i in range(UNIQUE):
        jobs.append(("rest" if i % 3 else "mcp", "push", {"text": text_of(i), "project": "conc", "tags": ["rain"]}))
    for i in range(10):  # the same texts again, racing the originals
        jobs.append(("rest" if i % 2 else "mcp", "push", {"text": text_of(i), "project": "conc", "tags": ["rain"]}))
    for i in range(10):
        jobs.append(
            (
                "rest" if i % 2 else "mcp",
                "search",
                {"query_text": f"rain on ridge {i % 5}", "project": "conc", "limit": 5},
            )
        )
    assert len(jobs) == 50
    start = asyncio.Event()
    ready: list[str] = []  # one entry per client connected and waiting for the start

    async def run(transport: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        if transport == "rest":
            async with httpx.AsyncClient(
                base_url=server.url, timeout=120, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
            ) as client:
                ready.append(transport)
                await start.wait()
                r = await client.post(f"/api/v1/memory/{tool}", json=args)
                assert r.status_code == 200, r.text
                return r.json()  # type: ignore[no-any-return]
        async with mcp_client(server.url) as mcp:
            ready.append(transport)
            await start.wait()
            res = await mcp.call_tool(tool, args)
            assert not res.is_error, res
            assert res.structured_content is not None
            data: dict[str, Any] = res.structured_content
            return data

    tasks = [asyncio.create_task(run(*job)) for job in jobs]
    # every client connected (or one failed: gather below says how)
    await eventually(lambda: len(ready) == len(jobs) or any(t.done() for t in tasks), what="every client connected")
    start.set()
    results = await asyncio.gather(*tasks)
    pushes = [r for (_, tool, _), r in zip(jobs, results, strict=True) if tool == "push"]
    assert sum(p["inserted"] for p in pushes) == UNIQUE
    assert sum(p["skippedDuplicates"] for p in pushes) == 10
    searches = [r for (_, tool, _), r in zip(jobs, results, strict=True) if tool == "search"]
    assert all(s["retrieval_mode"] in ("hybrid", "lexical_fallback") for s in searches)
    listing = await api(rest, "/thoughts", {"project": "conc", "limit": 100}, method="GET")
    contents = sorted(t["content"] for t in listing["thoughts"])
    assert contents == sorted(text_of(i) for i in range(UNIQUE))
    assert all(t["has_embedding"] for t in listing["thoughts"])
    metrics = await api(rest, "/memory/metrics", {}, method="GET")
    assert metrics["chunksIndexed"] == UNIQUE and metrics["documentsIndexed"] == UNIQUE
    body = await api(rest, "/memory/search", {"query_text": "rain on ridge 3", "project": "conc", "limit": 10})
    assert body["retrieval_mode"] == "hybrid" and len(body["results"]) == 10
