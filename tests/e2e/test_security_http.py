"""The HTTP front against an attacker's requests (app/core/http/front.py): DNS rebinding and
cross-site requests on every route, bodies a browser can send without asking (simple content types),
bodies over the size limit without a declared length, JSON nested too deep, unsafe request ids, and a
public /metrics. Each refusal carries the error body and leaves nothing changed, on REST and on /mcp."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from tests.support.server import (
    ADMIN_KEY,
    READ_KEY,
    PgCluster,
    RunningServer,
    server_settings,
    start_server,
    stop_server,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")

MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def create_call(name: str) -> dict[str, Any]:
    """The MCP call that would create project `name`."""
    params = {"name": "create_project", "arguments": {"name": name}}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


CONSOLE = "https://console.example.org"


@pytest.fixture(scope="module")
def open_server(pg: PgCluster) -> Iterator[RunningServer]:
    """The quickstart server: loopback, no key (open), every feature; MCP answers with SSE streams (the
    SDK's own request handling, where errors pass through its task groups); a console origin and an
    internal host name allowed."""
    settings = server_settings(
        pg.handle.url(pg.new_database()),
        api_keys=[],
        mcp_json_response=False,
        allowed_origins=[CONSOLE],
        allowed_hosts=["cairn.internal:*"],
    )
    srv, thread, app = start_server(settings)
    try:
        yield RunningServer(url=f"http://127.0.0.1:{settings.port}", settings=settings, app=app)
    finally:
        stop_server(srv, thread)


@pytest.fixture
async def anon(open_server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the open server (no key: none is needed)."""
    async with httpx.AsyncClient(base_url=open_server.url, timeout=60) as client:
        yield client


def assert_error(r: httpx.Response, status: int, code: int, words: str = "") -> dict[str, Any]:
    """`r` is the shared error body with this status and code (and `words` in its message)."""
    assert r.status_code == status, r.text
    error: dict[str, Any] = r.json()["error"]
    assert error["code"] == code and error["message"] and isinstance(error["suggestions"], list), error
    assert words.lower() in error["message"].lower(), error
    assert r.headers["x-request-id"]
    return error


async def project_names(client: httpx.AsyncClient) -> list[str]:
    """The projects the server holds (asked through an allowed host)."""
    r = await client.get("/api/v1/projects", params={"limit": 100})
    assert r.status_code == 200, r.text
    return [p["name"] for p in r.json()["projects"]]


def upload_parts(name: str) -> dict[str, Any]:
    """A small valid multipart upload."""
    return {"data": {"name": name}, "files": {"file": (f"{name}.csv", io.BytesIO(b"a,b\n1,2\n"), "text/csv")}}


# 1. DNS rebinding and cross-site requests (open mode: the attacker's case) ------------------------


REBOUND_HOSTS = ["evil.example:8000", "evil.example", "127.0.0.1.evil.example:8000", "localhost:80.evil", ""]


@pytest.mark.parametrize("host", REBOUND_HOSTS)
async def test_open_mode_refuses_a_foreign_host_on_every_route(
    open_server: RunningServer, anon: httpx.AsyncClient, host: str
) -> None:
    headers = {"Host": host}
    # Reads (what a rebound page would read), writes, the feature upload route and MCP alike.
    for r in [
        await anon.get("/api/v1/projects", headers=headers),
        await anon.get("/api/v1/audit", headers=headers),
        await anon.get("/openapi.json", headers=headers),
        await anon.get("/metrics", headers=headers),
        await anon.post("/api/v1/projects", json={"name": "rebound"}, headers=headers),
        await anon.post("/api/v1/memory/push", json={"text": "rebound", "project": "rebound"}, headers=headers),
        await anon.post(
            "/api/v1/datasets/upload", headers={**headers, "X-Requested-With": "x"}, **upload_parts("rebound")
        ),
        await anon.post("/mcp", json=create_call("rebound"), headers={**headers, **MCP_HEADERS}),
        await anon.post("/mcp/projects", json=create_call("rebound"), headers={**headers, **MCP_HEADERS}),
        await anon.get("/mcp", headers={**headers, "Accept": "text/event-stream"}),
    ]:
        assert_error(r, 421, 4030, "is not served here")
    assert "rebound" not in await project_names(anon)
    # The probes answer whatever the Host (orchestrators probe by address).
    assert (await anon.get("/healthz", headers=headers)).status_code == 200


async def test_allowed_hosts_are_served(open_server: RunningServer, anon: httpx.AsyncClient) -> None:
    port = open_server.settings.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"cairn.internal:{port}"):
        r = await anon.get("/api/v1/projects", headers={"Host": host})
        assert r.status_code == 200, (host, r.text)
    assert_error(await anon.get("/api/v1/projects", headers={"Host": "cairn.internal"}), 421, 4030)


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},  # sandboxed frames, file:// pages
        {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "cross-site"},  # a browser that sends no Origin
        {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"},
    ],
)
async def test_open_mode_refuses_cross_site_requests(
    open_server: RunningServer, anon: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    for r in [
        await anon.post("/api/v1/projects", json={"name": "csrf"}, headers=headers),
        await anon.post(
            "/api/v1/projects", content=b'{"name": "csrf"}', headers={**headers, "Content-Type": "text/plain"}
        ),
        await anon.get("/api/v1/projects", headers=headers),
        await anon.post(
            "/api/v1/datasets/upload", headers={**headers, "X-Requested-With": "x"}, **upload_parts("csrf")
        ),
        await anon.post("/mcp", json=create_call("csrf"), headers={**headers, **MCP_HEADERS}),
        await anon.get("/mcp", headers={**headers, "Accept": "text/event-stream"}),
    ]:
        assert_error(r, 403, 4030, "cross-site")
    assert "csrf" not in await project_names(anon)


async def test_only_its_own_origin_writes_to_an_open_server(
    open_server: RunningServer, anon: httpx.AsyncClient
) -> None:
    """Another port of the same host and a listed origin may read an open server, never write to it
    (issue 41: a page on another local port replaced a dataset; curl with `Origin: localhost:3000`)."""
    port = open_server.settings.port
    for origin in (f"http://127.0.0.1:{port}", f"http://cairn.internal:{port}"):
        host = f"cairn.internal:{port}" if "cairn.internal" in origin else f"127.0.0.1:{port}"
        r = await anon.post(
            "/api/v1/projects", json={"name": f"from-{len(origin)}"}, headers={"Origin": origin, "Host": host}
        )
        assert r.status_code == 200, (origin, r.text)
    for origin in ("http://localhost:3000", "http://127.0.0.1:8108", CONSOLE):
        assert (await anon.get("/api/v1/projects", headers={"Origin": origin})).status_code == 200, origin
        for r in (
            await anon.post("/api/v1/projects", json={"name": "foreign"}, headers={"Origin": origin}),
            await anon.post("/api/v1/datasets/upload", headers={"Origin": origin}, **upload_parts("foreign")),
        ):
            assert_error(r, 403, 4030, "cross-origin")
    for site in ("same-site", "cross-site"):
        r = await anon.post("/api/v1/projects", json={"name": "foreign"}, headers={"Sec-Fetch-Site": site})
        assert_error(r, 403, 4030, "cross-")
    assert "foreign" not in await project_names(anon)
    # MCP too (the SDK's own check behind the front's agrees).
    own = {"Origin": f"http://cairn.internal:{port}", "Host": f"cairn.internal:{port}"}
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    r = await anon.post("/mcp", json=ping, headers={**own, **MCP_HEADERS})
    assert r.status_code == 200, r.text
    assert_error(await anon.post("/mcp", json=ping, headers={"Origin": CONSOLE, **MCP_HEADERS}), 403, 4030)
    # A link followed from another site to the docs is a top-level navigation, not a forged request.
    nav = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    assert (await anon.get("/docs", headers=nav)).status_code == 200
    assert_error(await anon.post("/api/v1/projects", json={"name": "nav"}, headers=nav), 403, 4030)


SIMPLE_BODIES = [
    ("text/plain", b'{"name": "simple"}'),
    ("text/plain;charset=UTF-8", b'{"name": "simple"}'),
    ("application/x-www-form-urlencoded", b'{"name": "simple"}'),
    ("application/x-www-form-urlencoded", b""),  # a form with no fields
    (
        "multipart/form-data; boundary=X",
        b'--X\r\nContent-Disposition: form-data; name="name"\r\n\r\nsimple\r\n--X--\r\n',
    ),
    ("application/jsonp", b'{"name": "simple"}'),
    (None, b'{"name": "simple"}'),  # fetch() with an untyped Blob body
]


@pytest.mark.parametrize("ctype,body", SIMPLE_BODIES)
async def test_bodies_a_browser_can_send_unasked_are_refused(
    open_server: RunningServer, anon: httpx.AsyncClient, ctype: str | None, body: bytes
) -> None:
    headers = {"Content-Type": ctype} if ctype else {}
    for path in ("/api/v1/projects", "/api/v1/memory/push", "/mcp"):
        r = await anon.post(path, content=body, headers={**headers, **MCP_HEADERS})
        error = assert_error(r, 400, 4001, "Content-Type: application/json")
        assert any("Content-Type: application/json" in s for s in error["suggestions"])
    assert "simple" not in await project_names(anon)


async def test_json_with_a_charset_and_bodyless_calls_still_work(
    open_server: RunningServer, anon: httpx.AsyncClient
) -> None:
    r = await anon.post(
        "/api/v1/projects", content=b'{"name": "charset"}', headers={"Content-Type": "application/json; charset=utf-8"}
    )
    assert r.status_code == 200, r.text
    assert (await anon.post("/api/v1/embeddings/wait")).status_code == 200  # no body: `{}`
    assert "charset" in await project_names(anon)


async def test_open_mode_upload_needs_a_header_a_form_cannot_send(
    open_server: RunningServer, anon: httpx.AsyncClient
) -> None:
    """multipart/form-data is what a cross-site form posts, so the upload route takes it only with a
    header such a form cannot add."""
    for extra in ({}, {"Sec-Fetch-Site": "same-site"}, {"Authorization": "Basic dXNlcjpwYXNz"}):
        r = await anon.post("/api/v1/datasets/upload", headers=extra, **upload_parts("forged"))
        assert_error(r, 403, 4030, "cross-origin" if "Sec-Fetch-Site" in extra else "X-Requested-With")
    listed = await anon.get("/api/v1/datasets")
    assert listed.status_code == 200 and "forged" not in listed.text
    own_origin = f"http://127.0.0.1:{open_server.settings.port}"  # e.g. the /docs page's form
    for extra in (
        {"X-Requested-With": "curl"},
        {"Authorization": "Bearer anything"},
        {"Origin": own_origin},
        {"Sec-Fetch-Site": "same-origin"},
    ):
        r = await anon.post("/api/v1/datasets/upload", headers=extra, **upload_parts("allowed"))
        assert r.status_code < 500 and r.status_code != 403, r.text


# 1'. The same checks on a server with keys (defence in depth), both transports ---------------------


async def test_keyed_server_refuses_foreign_hosts_origins_and_simple_bodies(
    server: RunningServer, rest: httpx.AsyncClient
) -> None:
    auth_mcp = {"Authorization": f"Bearer {ADMIN_KEY}", **MCP_HEADERS}
    assert_error(await rest.post("/api/v1/projects", json={"name": "k1"}, headers={"Host": "evil.example"}), 421, 4030)
    assert_error(await rest.get("/api/v1/projects", headers={"Host": "evil.example"}), 421, 4030)
    call = create_call("k4")
    assert_error(await rest.post("/mcp", json=call, headers={**auth_mcp, "Host": "evil.example"}), 421, 4030)
    assert_error(
        await rest.post("/api/v1/projects", json={"name": "k2"}, headers={"Origin": "https://x.org"}), 403, 4030
    )
    assert_error(await rest.post("/mcp", json=call, headers={**auth_mcp, "Origin": "https://x.org"}), 403, 4030)
    text = {"Content-Type": "text/plain"}
    assert_error(await rest.post("/api/v1/projects", content=b'{"name": "k3"}', headers=text), 400, 4001)
    body = json.dumps(call).encode()
    assert_error(await rest.post("/mcp", content=body, headers={**auth_mcp, **text}), 400, 4001)
    assert await project_names(rest) == []
    # A keyed server leaves an upload without a key to the route's authentication.
    r = await rest.post("/api/v1/datasets/upload", headers={"Authorization": ""}, **upload_parts("nokey"))
    assert_error(r, 401, 4010)


# 2. Bodies: over the limit without a length, nested too deep, malformed ------------------------------


def chunked(prefix: bytes, size: int, suffix: bytes = b"") -> Any:
    """A request body of about `size` bytes sent without Content-Length (chunked)."""

    async def body() -> AsyncIterator[bytes]:
        yield prefix
        piece = b" " * 65536
        sent = 0
        while sent < size:
            yield piece
            sent += len(piece)
        yield suffix

    return body()


@pytest.mark.parametrize("which", ["keyed", "open"])
async def test_chunked_body_over_the_limit_is_4130_on_both_transports(
    which: str, request: pytest.FixtureRequest
) -> None:
    srv: RunningServer = request.getfixturevalue("server" if which == "keyed" else "open_server")
    headers = {"Content-Type": "application/json", **MCP_HEADERS}
    if which == "keyed":
        headers["Authorization"] = f"Bearer {ADMIN_KEY}"
    over = srv.settings.max_body_bytes + 1024
    async with httpx.AsyncClient(base_url=srv.url, timeout=60, headers=headers) as c:
        for _ in range(2):  # the connection survives a refusal
            r = await c.post("/api/v1/projects", content=chunked(b'{"name": "big", "description": "', over, b'"}'))
            assert_error(r, 413, 4130, "exceeds")
            call = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "create_project", '
            r = await c.post("/mcp", content=chunked(call + b'"arguments": {"name": "big", "x": "', over, b'"}}}'))
            assert_error(r, 413, 4130, "exceeds")
        # Under the limit, the same chunked request goes through.
        r = await c.post("/api/v1/projects", content=chunked(b'{"name": "small", "description": "', 1, b'"}'))
        assert r.status_code == 200, r.text
        names = await project_names(c)
        assert "small" in names and "big" not in names


DEEP = 2000


@pytest.mark.parametrize("which", ["keyed", "open"])
async def test_deeply_nested_json_is_invalid_input_never_500(which: str, request: pytest.FixtureRequest) -> None:
    srv: RunningServer = request.getfixturevalue("server" if which == "keyed" else "open_server")
    headers = {"Content-Type": "application/json", **MCP_HEADERS}
    if which == "keyed":
        headers["Authorization"] = f"Bearer {ADMIN_KEY}"
    async with httpx.AsyncClient(base_url=srv.url, timeout=60, headers=headers) as c:
        for body in (
            b"[" * DEEP + b"]" * DEEP,
            b'{"name": "deep", "description": ' + b"[" * DEEP + b"]" * DEEP + b"}",
            b'{"name": "deep", "metadata": ' + b'{"a": ' * 300 + b"1" + b"}" * 300 + b"}",
            b"[" * DEEP,  # and never closed
        ):
            assert_error(await c.post("/api/v1/projects", content=body), 400, 4001)
            assert_error(await c.post("/api/v1/memory/push", content=body), 400, 4001)
        # MCP answers the JSON-RPC parse error (its own error body), whatever the answer mode.
        deep_call = (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "create_project", '
            b'"arguments": {"name": "deep", "x": ' + b"[" * DEEP + b"]" * DEEP + b"}}}"
        )
        for path in ("/mcp", "/mcp/projects"):
            r = await c.post(path, content=deep_call)
            assert r.status_code == 400 and r.json()["error"]["code"] == -32700, r.text
        # Brackets inside strings are text, not nesting.
        r = await c.post("/api/v1/projects", content=b'{"name": "brackets", "description": "' + b"[{" * 500 + b'"}')
        assert r.status_code == 200, r.text
        names = await project_names(c)
        assert "brackets" in names and "deep" not in names


MALFORMED = [
    b'{"name": "trunc',
    b'{"name": "x",}',
    b"\xff\xfe{\x00}",
    b'{"name": "\xc3\x28"}',  # invalid UTF-8
    b"\x00",
    b"NaN",
    b"[1, 2",
    b'{"name": "x"} trailing',
    b'{"name": 1e99999}',
    b"\xef\xbb\xbf{}",  # a byte-order mark
    b'"just a string"',
    b"[]",
    b"null",
]


@pytest.mark.parametrize("body", MALFORMED)
async def test_malformed_json_bodies_are_invalid_input(
    server: RunningServer, rest: httpx.AsyncClient, body: bytes
) -> None:
    r = await rest.post("/api/v1/projects", content=body, headers={"Content-Type": "application/json"})
    assert_error(r, 400, 4001)
    assert await project_names(rest) == []


# 3. Request ids, /metrics ------------------------------------------------------------------------


async def test_only_safe_request_ids_are_kept(server: RunningServer, rest: httpx.AsyncClient) -> None:
    r = await rest.post("/api/v1/projects", json={"name": "traced"}, headers={"X-Request-ID": "trace-1.2:3_x"})
    assert r.headers["x-request-id"] == "trace-1.2:3_x"
    unsafe: list[Any] = ["a b", "<script>", "x" * 65, "id\\n", "é".encode(), "trace/1", "'; DROP"]
    for i, raw in enumerate(unsafe):
        r = await rest.post("/api/v1/projects", json={"name": f"unsafe-{i}"}, headers={"X-Request-ID": raw})
        assert r.status_code == 200, r.text
        echoed = r.headers["x-request-id"]
        assert echoed != (raw.decode("latin-1") if isinstance(raw, bytes) else raw)
        assert len(echoed) == 16 and all(ch in "0123456789abcdef" for ch in echoed)
        entry = (await rest.get("/api/v1/audit", params={"limit": 1})).json()["entries"][0]
        assert entry["operation"] == "create_project" and entry["request_id"] == echoed
    mcp = {"Authorization": f"Bearer {ADMIN_KEY}", **MCP_HEADERS, "X-Request-ID": "<img src=x>"}
    r = await rest.post("/mcp", json=create_call("over-mcp"), headers=mcp)
    assert r.status_code == 200 and not r.json()["result"].get("isError"), r.text
    echoed = r.headers["x-request-id"]
    assert echoed != "<img src=x>" and len(echoed) == 16
    entry = (await rest.get("/api/v1/audit", params={"limit": 1})).json()["entries"][0]
    assert (entry["transport"], entry["request_id"]) == ("mcp", echoed)
    async with httpx.AsyncClient(base_url=server.url) as anon:  # refusals carry an id too
        assert len((await anon.get("/api/v1/projects", headers={"X-Request-ID": "a b"})).headers["x-request-id"]) == 16


async def test_metrics_need_a_key_when_keys_exist(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as anon:
        assert_error(await anon.get("/metrics"), 401, 4010)
        assert_error(await anon.get("/metrics", headers={"Authorization": "Bearer not-a-valid-key-0000"}), 401, 4010)
        r = await anon.get("/metrics", headers={"Authorization": f"Bearer {READ_KEY}"})  # any valid key
        assert r.status_code == 200 and "cairn_calls_total" in r.text


async def test_metrics_stay_open_on_an_open_loopback_server(
    open_server: RunningServer, anon: httpx.AsyncClient
) -> None:
    assert (await anon.get("/metrics")).status_code == 200
    assert_error(await anon.get("/metrics", headers={"Host": "evil.example"}), 421, 4030)
