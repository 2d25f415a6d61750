"""The library-audit walkthrough on 5,000 demo books stays under 6,000 tokens of tool output."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from app.analysis.demo_upstream import create_demo_app
from tests.support.analysis import analysis_settings, write_registry
from tests.support.analysis_walkthrough import markdown_table, run_walkthrough
from tests.support.server import RunningServer, free_port, mcp_client, text_of
from tests.support.waiting import eventually_sync


@pytest.fixture
def big_shelf(tmp_path: Path, server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A 5,000-book demo upstream and a registry pointing at it (without auth)."""
    port = free_port()
    demo = uvicorn.Server(
        uvicorn.Config(create_demo_app(5000), host="127.0.0.1", port=port, log_config=None, log_level="warning")
    )
    thread = threading.Thread(target=demo.run, daemon=True)
    thread.start()
    eventually_sync(lambda: demo.started or not thread.is_alive(), what="the demo upstream started")
    assert demo.started, "the demo upstream did not start"
    url = f"http://127.0.0.1:{port}"
    registry = tmp_path / "upstreams.yaml"
    write_registry(registry, url, auth=None)
    analysis_settings(server, monkeypatch, upstreams=registry)
    yield url
    demo.should_exit = True
    thread.join(timeout=10)


async def test_library_audit_walkthrough_token_budget(server: RunningServer, big_shelf: str) -> None:
    async with mcp_client(server.url) as mcp:

        async def call(tool: str, args: dict[str, Any]) -> str:
            result = await mcp.call_tool(tool, args)
            assert not result.is_error, text_of(result)
            return text_of(result)

        steps = await run_walkthrough(call)
    by_step = {s.step: s.response for s in steps}
    assert by_step["1 ingest"]["stored"] == 5000 and by_step["1 ingest"]["pages"] == 50
    assert by_step["1 ingest"]["complete"] is True
    assert len(by_step["4 filter"]["rows"]) == 20
    assert by_step["7 semantic"]["findings"][0]["category"] == "quality_issue"
    assert by_step["8 clear"]["records_deleted"] == 5000
    total = sum(s.tokens for s in steps)
    print("\n" + markdown_table(steps))
    assert total < 6000, markdown_table(steps)
    for s in steps:  # each response states its own size (its JSON without the tokens field)
        assert 0 < s.response["tokens"] <= s.tokens


def test_cli_registers_demo_upstream_and_sweep() -> None:
    from app.cli import build_parser

    args = build_parser().parse_args(["analysis", "demo-upstream", "--port", "8123", "--books", "50"])
    assert args.port == 8123 and args.books == 50 and args.fn.__name__ == "cmd_demo_upstream"
    assert build_parser().parse_args(["analysis", "sweep"]).fn.__name__ == "cmd_sweep"
