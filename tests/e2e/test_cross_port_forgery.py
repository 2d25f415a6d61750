"""Issue 41, findings 1 and 2, from a hostile page in a real headless Chromium: a page served from
another port of 127.0.0.1 (cookies are not separated by port, and `SameSite` counts other ports as
the same site) can neither forge a console form nor write to an open server."""

from __future__ import annotations

import hashlib
import hmac
import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from playwright.async_api import Browser

from app.core.context import feature_settings_of
from app.datasets.config import DatasetSettings, projects_dir
from tests.support.browser import new_page, sign_in
from tests.support.server import ADMIN_KEY, PgCluster, RunningServer, server_settings, start_server, stop_server

pytestmark = pytest.mark.slow


@contextmanager
def hostile_page(html: str, set_cookie: str | None = None) -> Iterator[str]:
    """Serve `html` (with a `Set-Cookie` header when given) from another port of 127.0.0.1; yields its URL."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            if set_cookie:
                self.send_header("Set-Cookie", set_cookie)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


async def test_a_page_on_another_port_cannot_forge_a_console_form(
    server: RunningServer, browser: Browser, rest: httpx.AsyncClient
) -> None:
    victim = (await rest.post("/api/v1/keys", json={"scopes": ["read"], "name": "victim"})).json()["key"]
    seed = "a" * 43
    # The token as it was computed before the fix: from the seed alone, which the page sets.
    forged = hmac.new(seed.encode(), b"cairn-console-form", hashlib.sha256).hexdigest()[:40]
    action = f"{server.url}/ui/admin/keys/{victim['id']}/revoke"
    html = (
        f'<form id="f" method="post" action="{action}"><input name="csrf" value="{forged}"></form>'
        '<script>document.getElementById("f").submit()</script>'
    )
    with hostile_page(html, set_cookie=f"cairn_seed={seed}; Path=/ui") as evil:
        async with new_page(browser) as page:
            await sign_in(page, server.url, ADMIN_KEY, "/ui/admin")
            await page.goto(evil)
            await page.wait_for_url(lambda url: url.startswith(server.url))  # the form was answered
            # The page did plant its seed in the console's cookie jar (the attack's setting) ...
            jar = {c["name"]: c["value"] for c in await page.context.cookies(server.url + "/ui/")}
            assert jar.get("cairn_seed") == seed
            listed = (await rest.get("/api/v1/keys")).json()["keys"]
            assert [k["revoked_at"] for k in listed if k["id"] == victim["id"]] == [None]
            # ... and the form was refused all the same.
            assert page.url == action
            text = await page.locator("body").inner_text()
            assert "4030" in text, text[:500]


@pytest.fixture(scope="module")
def open_server(pg: PgCluster) -> Iterator[RunningServer]:
    """A quickstart server: loopback, no key (open)."""
    settings = server_settings(pg.handle.url(pg.new_database()), api_keys=[])
    srv, thread, app = start_server(settings)
    try:
        yield RunningServer(url=f"http://127.0.0.1:{settings.port}", settings=settings, app=app)
    finally:
        stop_server(srv, thread)


async def test_a_page_on_another_port_cannot_replace_a_dataset_of_an_open_server(
    open_server: RunningServer, browser: Browser
) -> None:
    original = b"region,amount\nnorth,10\nsouth,20\n"
    async with httpx.AsyncClient(base_url=open_server.url, timeout=60) as client:
        made = await client.post(
            "/api/v1/datasets/upload",
            headers={"X-Requested-With": "test"},
            data={"name": "sales"},
            files={"file": ("sales.csv", io.BytesIO(original), "text/csv")},
        )
        assert made.status_code == 200, made.text
        # curl naming another local origin is a browser's request in all but name: refused too.
        curl = await client.post(
            "/api/v1/datasets/upload",
            headers={"Origin": "http://localhost:3000", "X-Requested-With": "curl"},
            data={"name": "sales", "replace": "true"},
            files={"file": ("sales.csv", io.BytesIO(b"region,amount\nPWNED,0\n"), "text/csv")},
        )
        assert curl.status_code == 403 and curl.json()["error"]["code"] == 4030, curl.text
    html = (
        "<script>const fd = new FormData(); fd.append('name', 'sales'); fd.append('replace', 'true');"
        "fd.append('file', new Blob(['region,amount\\nPWNED,0\\n'], {type: 'text/csv'}), 'sales.csv');"
        f"fetch('{open_server.url}/api/v1/datasets/upload', {{method: 'POST', mode: 'no-cors', body: fd}})"
        ".then(() => {document.title = 'sent'}, () => {document.title = 'failed'});</script>"
    )
    with hostile_page(html) as evil:
        async with new_page(browser) as page:
            await page.goto(evil)
            await page.wait_for_function("document.title === 'sent' || document.title === 'failed'")
    cfg = feature_settings_of(open_server.app.state.cairn.feature_settings, DatasetSettings)
    stored = projects_dir(open_server.settings.data_dir, cfg) / "default" / "uploads" / "sales.csv"
    assert stored.read_bytes() == original
    # The server's own page (its origin) still may: the refusal above was the origin's.
    async with new_page(browser) as page:
        await page.goto(f"{open_server.url}/docs")
        status = await page.evaluate(
            "async () => { const fd = new FormData(); fd.append('name', 'own'); "
            "fd.append('file', new Blob(['a\\n1\\n'], {type: 'text/csv'}), 'own.csv'); "
            "return (await fetch('/api/v1/datasets/upload', {method: 'POST', body: fd})).status; }"
        )
        assert status == 200
    assert (stored.parent / "own.csv").exists()
