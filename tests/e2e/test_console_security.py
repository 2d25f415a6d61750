"""The console's guards, from an attacker's side: no page without a key, no form without its CSRF
token or from another origin, cookies no script or other site gets, no open redirect, a revoked or
project-bound key kept to what it may do, and an open server that locks once a key exists."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi.routing import APIRoute

from app.core import ui
from tests.support.server import (
    ADMIN_KEY,
    PROJECT_KEY,
    READ_KEY,
    PgCluster,
    RunningServer,
    server_settings,
    start_server,
    stop_server,
)

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
async def anon(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    """A browser-like client with no key, sending its own origin on posts."""
    async with httpx.AsyncClient(base_url=server.url, timeout=30, headers={"Origin": server.url}) as client:
        yield client


async def _signed_in(client: httpx.AsyncClient, key: str) -> str:
    """Sign `client` in with `key` through the form; returns the CSRF token of its session."""
    page = await client.get("/ui/login")
    token = _CSRF.search(page.text)
    assert token is not None
    done = await client.post("/ui/login", data={"csrf": token.group(1), "key": key, "next": "/ui/admin"})
    assert done.status_code == 303 and done.headers["location"] == "/ui/admin", done.text
    home = await client.get("/ui/admin")
    assert home.status_code == 200, home.text
    found = _CSRF.search(home.text)
    assert found is not None
    return found.group(1)


async def test_no_page_without_a_key(anon: httpx.AsyncClient) -> None:
    for path in ("/ui/", "/ui/admin", "/ui/admin/audit"):
        answer = await anon.get(path)
        assert answer.status_code == 303, path
        assert answer.headers["location"].startswith("/ui/login?next="), path
    refused = await anon.post("/ui/admin/keys", data={"csrf": "x", "name": "n", "scopes": "admin"})
    assert refused.status_code == 303 and refused.headers["location"].startswith("/ui/login")


async def test_the_key_cookie_is_httponly_strict_and_scoped_to_the_console(anon: httpx.AsyncClient) -> None:
    page = await anon.get("/ui/login")
    token = _CSRF.search(page.text)
    assert token is not None
    done = await anon.post("/ui/login", data={"csrf": token.group(1), "key": ADMIN_KEY, "next": "/ui/"})
    cookies = done.headers.get_list("set-cookie")
    key_cookie = next(c for c in cookies if c.startswith("cairn_key="))
    for flag in ("HttpOnly", "Path=/ui", "SameSite=strict"):
        assert flag.lower() in key_cookie.lower(), key_cookie
    # The sign-in starts a new CSRF seed (a token from before it is no longer valid).
    assert any(c.startswith("cairn_seed=") for c in cookies)
    page = await anon.get("/ui/")
    for header in ("content-security-policy", "x-frame-options", "x-content-type-options"):
        assert header in page.headers
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"


async def test_forms_need_their_csrf_token(anon: httpx.AsyncClient, rest: httpx.AsyncClient) -> None:
    csrf = await _signed_in(anon, ADMIN_KEY)
    for token in (None, "", "0" * 40, csrf[:-1] + ("0" if csrf[-1] != "0" else "1")):
        data = {"name": "forged", "scopes": "admin"}
        if token is not None:
            data["csrf"] = token
        answer = await anon.post("/ui/admin/keys", data=data)
        assert answer.status_code == 403, token
        assert "4030" in answer.text and "security token" in answer.text
    # The same form with the session's token works: the refusals above were the token's.
    made = await anon.post("/ui/admin/keys", data={"csrf": csrf, "name": "real", "scopes": "read"})
    assert made.status_code == 200 and "cairn_" in made.text
    listed = (await rest.get("/api/v1/keys")).json()["keys"]
    assert [k["name"] for k in listed] == ["real"]


async def test_forms_from_another_origin_or_none_are_refused(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30, headers={"Origin": server.url}) as client:
        csrf = await _signed_in(client, ADMIN_KEY)
        cookies = dict(client.cookies)
    form = {"csrf": csrf, "name": "cross", "scopes": "admin"}
    # A cross-site page posting the form (the browser names its origin) and a client naming none.
    for headers in ({"Origin": "http://evil.example"}, {}, {"Sec-Fetch-Site": "cross-site"}):
        async with httpx.AsyncClient(base_url=server.url, timeout=30, headers=headers, cookies=cookies) as client:
            answer = await client.post("/ui/admin/keys", data=form)
            assert answer.status_code == 403, headers
            assert answer.json()["error"]["code"] == 4030
    # DNS rebinding: another host name.
    async with httpx.AsyncClient(base_url=server.url, timeout=30, cookies=cookies) as client:
        answer = await client.get("/ui/admin", headers={"Host": "evil.example"})
        assert answer.status_code == 421
    # Same-origin (as a browser says it without an Origin header) is accepted.
    async with httpx.AsyncClient(
        base_url=server.url, timeout=30, headers={"Sec-Fetch-Site": "same-origin"}, cookies=cookies
    ) as client:
        answer = await client.post("/ui/admin/keys", data=form)
        assert answer.status_code == 200


async def test_no_open_redirect_after_sign_in(anon: httpx.AsyncClient) -> None:
    page = await anon.get("/ui/login")
    token = _CSRF.search(page.text)
    assert token is not None
    for target in ("https://evil.example/", "//evil.example/x", "/api/v1/projects", "/ui\\@evil.example"):
        done = await anon.post("/ui/login", data={"csrf": token.group(1), "key": ADMIN_KEY, "next": target})
        assert done.headers["location"] == "/ui/", target
        page = await anon.get("/ui/login")  # signed in: a new seed, so a new token
        token = _CSRF.search(page.text) or token


async def test_a_revoked_key_is_signed_out(server: RunningServer, rest: httpx.AsyncClient) -> None:
    made = (await rest.post("/api/v1/keys", json={"scopes": ["read"], "name": "short-lived"})).json()
    async with httpx.AsyncClient(base_url=server.url, timeout=30, headers={"Origin": server.url}) as client:
        page = await client.get("/ui/login")
        token = _CSRF.search(page.text)
        assert token is not None
        await client.post("/ui/login", data={"csrf": token.group(1), "key": made["token"], "next": "/ui/"})
        assert (await client.get("/ui/")).status_code == 200
        revoked = await rest.post(f"/api/v1/keys/{made['key']['id']}/revoke", json={})
        assert revoked.json() == {"revoked": 1}
        answer = await client.get("/ui/")  # the test server caches keys for 0 s
        assert answer.status_code == 303 and answer.headers["location"].endswith("why=refused")


async def test_keys_without_the_scope_are_refused(server: RunningServer, rest: httpx.AsyncClient) -> None:
    for key in (READ_KEY, PROJECT_KEY):
        async with httpx.AsyncClient(base_url=server.url, timeout=30, headers={"Origin": server.url}) as client:
            page = await client.get("/ui/login")
            token = _CSRF.search(page.text)
            assert token is not None
            await client.post("/ui/login", data={"csrf": token.group(1), "key": key, "next": "/ui/"})
            home = await client.get("/ui/")
            assert home.status_code == 200 and "/ui/admin" not in home.text
            csrf = _CSRF.search(home.text)
            assert csrf is not None
            listed = await client.get("/ui/admin")
            assert listed.status_code == 403 and "4030" in listed.text
            made = await client.post("/ui/admin/keys", data={"csrf": csrf.group(1), "scopes": "admin"})
            assert made.status_code == 403
    assert (await rest.get("/api/v1/keys")).json()["keys"] == []
    # Each refusal of a write is in the audit log, as over the other transports.
    audit = (await rest.get("/api/v1/audit", params={"operation": "create_key"})).json()["entries"]
    assert {(e["transport"], e["outcome"], e["error_code"]) for e in audit} == {("console", "error", 4030)}


@pytest.mark.slow
def test_an_open_server_serves_the_console_until_a_key_exists(pg: PgCluster) -> None:
    settings = server_settings(pg.handle.url(pg.new_database()), api_keys=[])
    srv, thread, _ = start_server(settings)
    base = f"http://127.0.0.1:{settings.port}"
    try:
        with httpx.Client(base_url=base, timeout=30, headers={"Origin": base}) as client:
            home = client.get("/ui/")
            assert home.status_code == 200 and "open-mode" in home.text
            csrf = _CSRF.search(client.get("/ui/admin").text)
            assert csrf is not None
            made = client.post("/ui/admin/keys", data={"csrf": csrf.group(1), "name": "first", "scopes": "admin"})
            token = re.search(r'id="new-token">(cairn_[^<]+)<', made.text)
            assert token is not None
            # Locked within the guard's interval: the console now asks for a key, and takes this one.
            for _ in range(50):
                if client.get("/ui/").status_code == 303:
                    break
                time.sleep(0.1)
            assert client.get("/ui/").status_code == 303
            login = client.get("/ui/login")
            csrf = _CSRF.search(login.text)
            assert csrf is not None
            done = client.post("/ui/login", data={"csrf": csrf.group(1), "key": token.group(1), "next": "/ui/"})
            assert done.status_code == 303 and done.headers["location"] == "/ui/"
            assert client.get("/ui/").status_code == 200
    finally:
        stop_server(srv, thread)


async def test_no_console_page_answers_a_server_error_to_junk(server: RunningServer) -> None:
    """Every console page, signed in as admin, with junk in its path and query: an error page or a
    redirect, never a 5xx."""
    console = server.app.state.console
    routes = [r for router in (ui.core_router, *(s.router for s in console.sections)) for r in router.routes]
    assert all(isinstance(r, APIRoute) for r in routes)
    junk = {
        "offset": "abc",
        "limit": "-5",
        "q": "\x00'\"<x>",
        "mode": "nope",
        "days": "1e9",
        "k": "9999999999999",
        "project": "../etc",
        "path": "/etc/passwd",
        "since": "yesterday",
        "before_id": "x",
        "revoked": "2",
    }
    async with httpx.AsyncClient(base_url=server.url, timeout=60, headers={"Origin": server.url}) as client:
        csrf = await _signed_in(client, ADMIN_KEY)
        seen = 0
        for route in routes:
            path = route.path.replace("{rest:path}", "x/y").replace("{name:path}", "a%2Fb")
            for name in route.param_convertors:
                path = path.replace("{" + name + "}", "not-an-id")
            for method in route.methods or ():
                if method == "GET":
                    answer = await client.get(path, params=junk)
                elif method == "POST" and path not in ("/ui/login", "/ui/logout"):  # stay signed in
                    answer = await client.post(path, data={**junk, "csrf": csrf})
                else:
                    continue
                seen += 1
                assert answer.status_code != 303 or "login" not in answer.headers["location"], path
                assert answer.status_code < 500, (method, path, answer.status_code, answer.text[:300])
    assert seen > 30
