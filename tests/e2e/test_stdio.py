"""`cairn stdio`: the same registry and executor over stdin/stdout, driven by the MCP SDK's stdio client
the way a desktop client starts it (a subprocess, the embedded PostgreSQL in its data directory)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.support.server import error_of, resource_text

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _env(data_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    return {**env, "CAIRN_DATA_DIR": data_dir, "CAIRN_LOG_LEVEL": "INFO", "CAIRN_EMBEDDING_WRITE_MODE": "sync"}


async def test_stdio_serves_the_chosen_toolsets_through_the_executor() -> None:
    data_dir = tempfile.mkdtemp(prefix="cairn-stdio-")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "app", "stdio", "--toolsets", "graph,datasets"],
        env=_env(data_dir),
        cwd=str(ROOT),
    )
    errlog = Path(data_dir) / "stderr.log"
    with errlog.open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as mcp:
            init = await mcp.initialize()
            assert init.server_info.name == "cairn"
            tools = {t.name for t in (await mcp.list_tools()).tools}
            assert {"create_entities", "search_nodes", "read_graph"} <= tools
            assert "push" not in tools  # the memory toolset was not chosen
            made = await mcp.call_tool(
                "create_entities",
                {"entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}]},
            )
            assert not made.is_error and made.structured_content is not None, made
            assert made.structured_content["embedding"] == "done"
            found = await mcp.call_tool("search_nodes", {"query": "first program"})
            assert found.structured_content is not None
            assert [e["name"] for e in found.structured_content["entities"]] == ["Ada"]
            # Outside the chosen toolsets: the shared error body, naming the option that lists it (a stdio
            # session has no URL to change: its toolsets are chosen when it starts).
            other = await mcp.call_tool("push", {"text": "x"})
            assert other.is_error and error_of(other)["code"] == 4002
            assert error_of(other)["suggestions"] == ["It is in memory: start `cairn stdio --toolsets memory`"]
            # A file outside the data roots: the refusal names the route that takes a file of the caller's.
            mine = Path(data_dir) / "mine.csv"  # the data directory, not its data root (datasets/)
            mine.write_text("a\n1\n")
            outside = await mcp.call_tool("register_dataset", {"name": "mine", "path": str(mine)})
            assert outside.is_error and error_of(outside)["code"] == 4030, outside
            assert any("POST /api/v1/datasets/upload" in s for s in error_of(outside)["suggestions"]), outside
            toolsets = resource_text(await mcp.read_resource("mcp://toolsets"))
            assert "cairn stdio --toolsets a,b" in toolsets and "/mcp/a,b" not in toolsets
            health = await mcp.read_resource("mcp://health")
            assert '"status"' in resource_text(health)
    log = errlog.read_text()
    assert "cairn ready" in log and '"transport": "stdio"' in log, log[-2000:]
    assert "cairn stopped" in log, log[-2000:]  # stdin closed: the server stopped, PostgreSQL with it
    assert not (Path(data_dir) / "pgdata" / "postmaster.pid").exists()


def test_stdio_refuses_an_unknown_toolset_before_speaking() -> None:
    data_dir = tempfile.mkdtemp(prefix="cairn-stdio-")
    done = subprocess.run(
        [sys.executable, "-m", "app", "stdio", "--toolsets", "nope"],
        env=_env(data_dir),
        cwd=ROOT,
        input="",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout == ""  # nothing but the protocol ever goes to stdout
    assert "error: " in done.stderr and "nope" in done.stderr
    assert "hint: Toolsets: " in done.stderr and "(e.g. --toolsets memory or --toolsets memory,projects)" in done.stderr
    assert not (Path(data_dir) / "pgdata" / "postmaster.pid").exists()
