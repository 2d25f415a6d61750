"""The reference memory server (`@modelcontextprotocol/server-memory`), pinned and installed from npm
into `.cache/` (git-ignored), driven over stdio by the real MCP client."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.support.server import ROOT

PACKAGE = "@modelcontextprotocol/server-memory"
VERSION = "2026.8.31"
PREFIX = ROOT / ".cache" / "reference-memory"
SCRIPT = PREFIX / "node_modules" / PACKAGE / "dist" / "index.js"


def installed() -> Path:
    """The reference server's entry script, installed with npm on first use."""
    manifest = SCRIPT.parents[1] / "package.json"
    if not manifest.exists() or json.loads(manifest.read_text())["version"] != VERSION:
        npm = shutil.which("npm")
        assert npm, "npm (Node.js) is needed to run the reference memory server"
        PREFIX.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [npm, "install", "--prefix", str(PREFIX), "--no-audit", "--no-fund", "--silent", f"{PACKAGE}@{VERSION}"],
            check=True,
            timeout=600,
        )
    return SCRIPT


@asynccontextmanager
async def reference_session(memory_file: Path) -> AsyncIterator[ClientSession]:
    """An MCP client session on the reference server, storing its graph in `memory_file`."""
    node = shutil.which("node")
    assert node, "node is needed to run the reference memory server"
    params = StdioServerParameters(
        command=node,
        args=[str(installed())],
        env={"MEMORY_FILE_PATH": str(memory_file), "PATH": os.environ.get("PATH", "")},
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session
