"""Hostile input, generated from the servers' own schemas: REST from /openapi.json (schemathesis) and
every MCP tool from its inputSchema (hypothesis). No 5xx, no response outside its declared schema,
every MCP failure an isError result carrying the error body."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import negative_data_rejection, response_schema_conformance

from tests.support.schema_strategy import from_json_schema
from tests.support.server import ADMIN_KEY, RunningServer, mcp_client, text_of

pytestmark = pytest.mark.slow  # subprocesses, restarts or generated inputs: seconds per test

EXAMPLES = 25
KNOWN_CODES = {4001, 4002, 4003, 4004, 4010, 4030, 4090, 4130, 4290, 5001, 5002, 5003, 5004, 5020, 5030}


def test_rest_api_survives_generated_requests(server: RunningServer) -> None:
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json").exclude(path_regex="^/api/v1/testing/")
    checks = [not_a_server_error, response_schema_conformance, negative_data_rejection]
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) >= 4
    failures: list[str] = []
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: Any) -> None:
            case.call_and_validate(base_url=server.url, headers=headers, checks=checks)

        try:
            check()
        except Exception as exc:  # collect every operation's failure, then report them together
            failures.append(f"{operation.method.upper()} {operation.path}: {str(exc)[:800]}")
    assert not failures, "\n\n".join(failures)


def _examples(input_schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Argument sets drawn from the tool's schema, plus arbitrary (mostly invalid) objects."""
    strategy = st.one_of(
        from_json_schema(input_schema),
        st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=20), st.none()), max_size=3),
    )
    examples: list[dict[str, Any]] = []

    @given(strategy)
    @settings(
        max_examples=EXAMPLES, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    def collect(args: dict[str, Any]) -> None:
        examples.append(args)

    collect()
    return examples


async def _tools(server: RunningServer) -> list[Any]:
    async with mcp_client(server.url) as mcp:
        return [t for t in (await mcp.list_tools()).tools if not t.name.startswith("test_")]


async def test_every_mcp_tool_survives_generated_arguments(server: RunningServer) -> None:
    tools = await _tools(server)
    assert tools
    failures: list[str] = []
    async with mcp_client(server.url) as mcp:
        for tool in tools:
            for args in _examples(tool.input_schema):
                result = await mcp.call_tool(tool.name, args)
                if result.is_error:
                    body = json.loads(text_of(result))
                    code = body.get("error", {}).get("code")
                    if code not in KNOWN_CODES:
                        failures.append(f"{tool.name}({args!r}) -> {body}")
                elif result.structured_content is None:
                    failures.append(f"{tool.name}({args!r}) -> no structured content")
    assert not failures, "\n".join(failures[:10])


async def test_server_still_healthy_after_fuzzing(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as c:
        assert (await c.get("/readyz")).status_code == 200
