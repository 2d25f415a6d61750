"""What connecting costs: the size of `tools/list` on each MCP endpoint, next to the reference memory
server's.

Starts `cairn serve` (default settings, temporary embedded PostgreSQL) and lists the tools of plain
`/mcp`, of each toolset endpoint and of `/mcp/all` with the real MCP client; then the reference server
(`@modelcontextprotocol/server-memory`, pinned, installed from npm into `.cache/`) over stdio.

Two sizes per endpoint:
- **prompt**: name + description + inputSchema (compact JSON) of every tool, what clients put in front
  of the model on every turn;
- **wire**: the whole tools/list entries as compact JSON (titles, annotations, output schemas).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from bench_mcp import KEY, Server  # noqa: E402

REFERENCE = "@modelcontextprotocol/server-memory"
REFERENCE_VERSION = "2026.8.31"


def _sizes(tools: list[Any]) -> dict[str, int]:
    entries = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
    prompt = sum(
        len(e["name"]) + len(e.get("description", "")) + len(json.dumps(e["inputSchema"], separators=(",", ":")))
        for e in entries
    )
    wire = sum(len(json.dumps(e, separators=(",", ":"))) for e in entries)
    return {"tools": len(entries), "prompt": prompt, "wire": wire}


async def _cairn_lists(url: str) -> list[tuple[str, dict[str, int]]]:
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as http:
        listed = json.loads((await http.get(f"{url}/api/v1/resources/toolsets")).text)["toolsets"]
        endpoints = ["/mcp", *(t["endpoint"] for t in listed), "/mcp/all"]
        out = []
        for endpoint in endpoints:
            async with streamable_http_client(f"{url}{endpoint}", http_client=http) as (read, write):
                async with ClientSession(read, write) as client:
                    await client.initialize()
                    out.append((endpoint, _sizes(list((await client.list_tools()).tools))))
        return out


def _reference_script() -> Path:
    prefix = ROOT / ".cache" / "reference-memory"
    script = prefix / "node_modules" / REFERENCE / "dist" / "index.js"
    manifest = script.parents[1] / "package.json"
    if not manifest.exists() or json.loads(manifest.read_text())["version"] != REFERENCE_VERSION:
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "npm",
                "install",
                "--prefix",
                str(prefix),
                "--no-audit",
                "--no-fund",
                "--silent",
                f"{REFERENCE}@{REFERENCE_VERSION}",
            ],
            check=True,
            timeout=600,
        )
    return script


@asynccontextmanager
async def reference_session(memory_file: Path) -> AsyncIterator[Any]:
    """An MCP client session on the pinned reference server (node, stdio), storing its graph in
    `memory_file`."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=shutil.which("node") or "node",
        args=[str(_reference_script())],
        env={"PATH": os.environ.get("PATH", ""), "MEMORY_FILE_PATH": str(memory_file)},
    )
    with open(os.devnull, "w") as devnull:  # noqa: ASYNC230 - opening /dev/null does not block
        async with stdio_client(params, errlog=devnull) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            yield client


async def _reference_list() -> dict[str, int]:
    with tempfile.TemporaryDirectory() as tmp:
        async with reference_session(Path(tmp) / "memory.jsonl") as client:
            return _sizes(list((await client.list_tools()).tools))


def run(quick: bool = False) -> str:
    """Measure and return the markdown section."""
    server = Server()
    server.start()
    try:
        rows = asyncio.run(_cairn_lists(server.url))
    finally:
        server.stop()
    try:
        reference: dict[str, int] | None = asyncio.run(_reference_list())
    except Exception as exc:  # npm or node missing: say so instead of a figure
        reference, error = None, f"{type(exc).__name__}: {exc}"
    lines = [
        "## Tool lists per MCP endpoint",
        "",
        "`scripts/bench_toolsets.py`: `tools/list` of each endpoint of a server with default settings, read "
        "with the real MCP client. *prompt* = name + description + inputSchema (compact JSON), what a "
        "client puts in front of the model on every turn; *wire* = the whole entries (titles, annotations, "
        "output schemas where listed). Characters; roughly 4 per token.",
        "",
        "| endpoint | tools | prompt chars | wire chars |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| `{e}` | {s['tools']} | {s['prompt']:,} | {s['wire']:,} |" for e, s in rows]
    if reference is not None:
        lines.append(
            f"| reference server `{REFERENCE}@{REFERENCE_VERSION}` (stdio) | {reference['tools']} | "
            f"{reference['prompt']:,} | {reference['wire']:,} |"
        )
        ours = dict(rows).get("/mcp/reference")
        if ours:
            prompt_ratio = ours["prompt"] / reference["prompt"]
            wire_ratio = ours["wire"] / reference["wire"]
            lines += [
                "",
                f"`/mcp/reference` against the reference server: prompt {prompt_ratio:.2f} times, "
                f"wire {wire_ratio:.2f} times.",
            ]
    else:
        lines += ["", f"The reference server could not be listed: {error}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
