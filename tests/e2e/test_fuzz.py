"""Hostile input, generated from the servers' own schemas: REST from /openapi.json (schemathesis) and
every MCP tool from its inputSchema (hypothesis). No 5xx, no response outside its declared schema,
every MCP failure an isError result carrying the error body. Then hostile bodies on every route:
chunked past the size limit, nested too deep, malformed, of the wrong type, and malformed multipart
uploads; none answers 5xx, each answers an error body."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
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


HOSTILE_JSON = [
    b"[" * 2000 + b"]" * 2000,
    b'{"a": ' * 1000 + b"1" + b"}" * 1000,
    b"[" * 100_000,
    b'{"name": "trunc',
    b"\xff\xfe\x00garbage",
    b'{"name": "\xc3\x28"}',
    b"\x00" * 64,
    b'{"name": 1e99999, "limit": -1e99999}',
    b'{"name": "x"}{"name": "y"}',
    b"NaN",
    b'"\\ud800"',
    b"[]",
    b"0",
]
WRONG_TYPES = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=B",
    "application/xml",
    "application/json-patch+json",
    "",
]


def _assert_error_body(r: httpx.Response, where: str, failures: list[str]) -> None:
    """A 4xx with the shared error body and a known code; else one line in `failures`."""
    if r.status_code >= 500:
        failures.append(f"{where}: {r.status_code} {r.text[:200]}")
        return
    try:
        error = r.json()["error"]
        ok = error["code"] in KNOWN_CODES and bool(error["message"]) and isinstance(error["suggestions"], list)
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok or r.status_code < 400:
        failures.append(f"{where}: {r.status_code} {r.text[:200]}")


def _chunked(size: int) -> Any:
    async def body() -> AsyncIterator[bytes]:
        yield b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "name": "x", "text": "'
        piece = b"x" * 65536
        for _ in range(size // len(piece) + 1):
            yield piece
        yield b'"}'

    return body()


def _json_routes(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(method, path) of every REST operation that takes a JSON body, path parameters filled in."""
    routes = []
    for path, item in doc["paths"].items():
        for method, entry in item.items():
            if "application/json" in (entry.get("requestBody") or {}).get("content", {}):
                routes.append((method.upper(), path.replace("{", "").replace("}", "")))
    return routes


async def test_hostile_bodies_answer_the_error_body_never_5xx(server: RunningServer) -> None:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}", "Accept": "application/json, text/event-stream"}
    failures: list[str] = []
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=120) as c:
        doc = (await c.get("/openapi.json")).json()
        routes = _json_routes(doc)
        assert len(routes) >= 20
        toolsets = [t["name"] for t in json.loads((await c.get("/api/v1/resources/toolsets")).text)["toolsets"]]
        mcp_paths = ["/mcp", *(f"/mcp/{name}" for name in toolsets)]
        for method, path in routes:
            for body in HOSTILE_JSON:
                r = await c.request(method, path, content=body, headers={"Content-Type": "application/json"})
                _assert_error_body(r, f"{method} {path} {body[:30]!r}", failures)
            for ctype in WRONG_TYPES:
                r = await c.request(method, path, content=b'{"name": "x"}', headers={"Content-Type": ctype})
                _assert_error_body(r, f"{method} {path} as {ctype!r}", failures)
                if ctype:  # the type is checked before anything else: 4001
                    assert r.status_code == 400 and r.json()["error"]["code"] == 4001, (path, ctype, r.text)
        # Past the size limit without a declared length: a sample of routes and every MCP endpoint.
        over = server.settings.max_body_bytes + 1
        for method, path in [*routes[::7], *(("POST", p) for p in mcp_paths)]:
            r = await c.request(method, path, content=_chunked(over), headers={"Content-Type": "application/json"})
            _assert_error_body(r, f"{method} {path} chunked", failures)
            if r.status_code != 413:
                failures.append(f"{method} {path} chunked: {r.status_code}, not 413")
        for path in mcp_paths:
            for ctype in WRONG_TYPES:
                r = await c.post(
                    path, content=b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}', headers={"Content-Type": ctype}
                )
                _assert_error_body(r, f"POST {path} as {ctype!r}", failures)
            for body in HOSTILE_JSON:  # MCP's own answer: a JSON-RPC error, never a 5xx
                r = await c.post(path, content=body, headers={"Content-Type": "application/json"})
                if r.status_code >= 500 or "error" not in r.json():
                    failures.append(f"POST {path} {body[:30]!r}: {r.status_code} {r.text[:200]}")
    assert not failures, "\n".join(failures[:30])


MULTIPART_OK_HEAD = b'--B\r\nContent-Disposition: form-data; name="name"\r\n\r\nfuzzed\r\n'
FILE_HEAD = b'--B\r\nContent-Disposition: form-data; name="file"; filename="f.csv"\r\nContent-Type: text/csv\r\n\r\n'
MALFORMED_MULTIPART: list[tuple[str, bytes]] = [
    ("multipart/form-data", MULTIPART_OK_HEAD + FILE_HEAD + b"a\n1\n\r\n--B--\r\n"),  # no boundary parameter
    ("multipart/form-data; boundary=OTHER", MULTIPART_OK_HEAD + FILE_HEAD + b"a\n1\n\r\n--B--\r\n"),
    ("multipart/form-data; boundary=B", MULTIPART_OK_HEAD + FILE_HEAD + b"a\n1\n"),  # never closed
    ("multipart/form-data; boundary=B", MULTIPART_OK_HEAD + b"--B--\r\n"),  # no file part
    ("multipart/form-data; boundary=B", FILE_HEAD + b"a\n1\n\r\n--B--\r\n"),  # no name
    ("multipart/form-data; boundary=B", MULTIPART_OK_HEAD + FILE_HEAD + b"a\n\r\n" + FILE_HEAD + b"b\n\r\n--B--\r\n"),
    ("multipart/form-data; boundary=B", b"--B\r\nno header end" + b"x" * 70_000),
    ("multipart/form-data; boundary=B", b"--B\r\n" + b"X-Long: " + b"h" * 100_000 + b"\r\n\r\n--B--\r\n"),
    ("multipart/form-data; boundary=B", b"--B\r\n" + b"X-H: v\r\n" * 5000 + b"\r\n--B--\r\n"),
    ("multipart/form-data; boundary=B", b"\xff\xfe\x00 garbage \x00" * 100),
    ("multipart/form-data; boundary=B", b""),
    (
        "multipart/form-data; boundary=B",
        MULTIPART_OK_HEAD.replace(b"fuzzed", b"x" * 100_000) + FILE_HEAD + b"a\n1\n\r\n--B--\r\n",
    ),
    (
        "multipart/form-data; boundary=B",
        MULTIPART_OK_HEAD.replace(b"fuzzed", b"bad name;") + FILE_HEAD + b"a\n1\n\r\n--B--\r\n",
    ),
]


async def test_malformed_multipart_uploads_are_invalid_input(server: RunningServer) -> None:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    failures: list[str] = []
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as c:
        for ctype, body in MALFORMED_MULTIPART:
            r = await c.post("/api/v1/datasets/upload", content=body, headers={"Content-Type": ctype})
            _assert_error_body(r, f"upload {ctype!r} {body[:40]!r}", failures)
            if r.status_code < 500 and r.json().get("error", {}).get("code") not in (4001, 4130):
                failures.append(f"upload {ctype!r} {body[:40]!r}: {r.status_code} {r.text[:200]}")
        listed = (await c.get("/api/v1/datasets")).text
        assert "fuzzed" not in listed
    assert not failures, "\n".join(failures)


async def test_server_still_healthy_after_fuzzing(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as c:
        assert (await c.get("/readyz")).status_code == 200
