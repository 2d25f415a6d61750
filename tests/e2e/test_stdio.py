"""`cairn stdio`: the same registry and executor over stdin/stdout, driven by the MCP SDK's stdio client
the way a desktop client starts it (a subprocess, the embedded PostgreSQL in its data directory)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

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


async def test_lines_that_are_no_message_get_the_json_rpc_error_and_a_log_line() -> None:
    """Issue 41 #11: invalid JSON, a truncated line, invalid UTF-8, `{}`, `null` and a batch got no
    reply and no log line. Each now gets the JSON-RPC error (id null: -32700 when it is not JSON, -32600
    when it is no message), a warning on stderr, and the session goes on."""
    data_dir = tempfile.mkdtemp(prefix="cairn-stdio-")
    errlog = Path(data_dir) / "stderr.log"
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    bad = [
        (b"this is not json", -32700),
        (b'{"jsonrpc": "2.0", "id": 2, "method": "pi', -32700),  # truncated
        (b"\xff\xfe\xfd", -32700),  # not UTF-8
        (b"{}", -32600),
        (b"null", -32600),
        (b'[{"jsonrpc": "2.0", "id": 3, "method": "ping"}]', -32600),  # a batch
    ]
    with errlog.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app", "stdio", "--toolsets", "projects",
            env=_env(data_dir), cwd=str(ROOT),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
        )  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None

        async def reply() -> dict[str, Any]:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=120)
            assert line, errlog.read_text()[-2000:]
            found: dict[str, Any] = json.loads(line)
            return found

        try:
            proc.stdin.write(json.dumps(init).encode() + b"\n")
            assert (await reply())["id"] == 1
            proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n\n')  # a blank line: nothing
            for line, _ in bad:
                proc.stdin.write(line + b"\n")
            proc.stdin.write(b'{"jsonrpc": "2.0", "id": 9, "method": "ping"}\n')
            await proc.stdin.drain()
            answers = [await reply() for _ in bad]
            assert [(a["id"], a["error"]["code"]) for a in answers] == [(None, code) for _, code in bad], answers
            assert all(a["error"]["message"] for a in answers)
            assert await reply() == {"jsonrpc": "2.0", "id": 9, "result": {}}  # the session goes on
        finally:
            proc.stdin.close()
            await asyncio.wait_for(proc.wait(), timeout=120)
    log = errlog.read_text(errors="replace")
    assert log.count("answered a line that is not a JSON-RPC message") == len(bad), log[-3000:]
