"""The console's sign-in and admin pages in a real headless Chromium: keys, the audit log, health,
settings, and what a key without the admin scope is refused."""

from __future__ import annotations

import httpx
import pytest
from playwright.async_api import Browser, expect

from tests.support.browser import PHONE, new_page, shot, sign_in
from tests.support.server import ADMIN_KEY, READ_KEY, RunningServer

pytestmark = pytest.mark.slow


async def test_sign_in_is_required_and_a_wrong_key_is_refused(server: RunningServer, browser: Browser) -> None:
    async with new_page(browser) as page:
        await page.goto(f"{server.url}/ui/")
        await expect(page).to_have_url(f"{server.url}/ui/login?next=%2Fui%2F&why=needed")
        await shot(page, "login")
        await page.fill("#key", "not-a-key-0123456789")
        await page.click("button[type=submit]")
        await expect(page.locator("[role=alert]")).to_contain_text("not accepted")
        await sign_in(page, server.url, ADMIN_KEY)
        await expect(page.locator("h1")).to_have_text("Project default")
        await expect(page.locator("header nav")).to_contain_text("Admin")
        await shot(page, "home")


async def test_keys_are_created_once_listed_and_revoked(server: RunningServer, browser: Browser) -> None:
    async with new_page(browser) as page:
        await sign_in(page, server.url, ADMIN_KEY, "/ui/admin")
        await page.fill("input[name=name]", "console-made")
        await page.check("input[name=scopes][value=write]")
        await page.click("text=Create key")
        token = (await page.locator("#new-token").inner_text()).strip()
        assert token.startswith("cairn_")
        await shot(page, "admin-key-created")
        # The key works over REST, and the page never shows it again.
        async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {token}"}) as client:
            assert (await client.get("/api/v1/projects")).status_code == 200
        await page.goto(f"{server.url}/ui/admin")
        assert token not in await page.content()
        row = page.locator("tr", has_text="console-made")
        await expect(row).to_contain_text("read, write")
        page.once("dialog", lambda dialog: dialog.accept())
        await row.locator("button", has_text="Revoke").click()
        await expect(page.locator(".flash")).to_contain_text("revoked")
        async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {token}"}) as client:
            assert (await client.get("/api/v1/projects")).status_code == 401
        # Both writes are in the audit log, made over the console.
        await page.goto(f"{server.url}/ui/admin/audit?operation=create_key")
        await expect(page.locator("#audit")).to_contain_text("console")
        await page.goto(f"{server.url}/ui/admin/audit")
        await expect(page.locator("#audit")).to_contain_text("revoke_key")
        await shot(page, "admin-audit")


async def test_health_and_settings_pages(server: RunningServer, browser: Browser) -> None:
    async with new_page(browser, PHONE) as page:
        await sign_in(page, server.url, ADMIN_KEY, "/ui/admin/health")
        await expect(page.locator("#health")).to_contain_text("reachable")
        await shot(page, "admin-health-phone")
        await page.goto(f"{server.url}/ui/admin/settings")
        await expect(page.locator("h1")).to_have_text("Settings")


async def test_a_read_key_sees_no_admin_and_is_refused_a_write(server: RunningServer, browser: Browser) -> None:
    async with new_page(browser) as page:
        await sign_in(page, server.url, READ_KEY)
        await expect(page.locator("header nav")).not_to_contain_text("Admin")
        await page.goto(f"{server.url}/ui/admin")
        await expect(page.locator("[role=alert]")).to_contain_text("4030")
        await shot(page, "refused-read-key")


async def test_pages_are_keyboard_reachable_and_break_no_policy(server: RunningServer, browser: Browser) -> None:
    async with new_page(browser) as page:
        problems: list[str] = []
        page.on("console", lambda msg: problems.append(msg.text) if msg.type in ("error", "warning") else None)
        page.on("pageerror", lambda exc: problems.append(str(exc)))
        await sign_in(page, server.url, ADMIN_KEY)
        await page.keyboard.press("Tab")
        focused = await page.evaluate("document.activeElement.textContent")
        assert focused == "Skip to content"
        await page.keyboard.press("Tab")
        assert await page.evaluate("document.activeElement.textContent") == "Cairn"
        await page.keyboard.press("Tab")
        first = await page.evaluate("document.activeElement.getAttribute('href')")
        assert first.startswith("/ui/") and first != "/ui/"
        await page.keyboard.press("Enter")
        await page.wait_for_url(f"{server.url}{first}")
        for path in ("/ui/admin/audit", "/ui/admin/health", "/ui/admin/settings"):
            await page.goto(f"{server.url}{path}")
        assert problems == []


async def test_no_page_breaks_the_content_policy(
    server: RunningServer, browser: Browser, rest: httpx.AsyncClient
) -> None:
    """One page of each section, data in it, opened in Chromium: no script error and no content the
    page's policy refused (Chromium reports both on the console)."""
    pushed = await rest.post(
        "/api/v1/memory/push",
        json={"text": "The nightly export failed twice this week.", "tags": ["ops"], "wait_for_embedding": True},
    )
    assert pushed.status_code == 200, pushed.text
    found = await rest.post("/api/v1/memory/search", json={"query_text": "nightly export"})
    assert found.status_code == 200, found.text
    memory_id = found.json()["results"][0]["id"]
    await rest.post(
        "/api/v1/thoughts", json={"content": "Check the export job's disk quota.", "metadata": {"type": "task"}}
    )
    await rest.post(
        "/api/v1/graph/entities",
        json={"entities": [{"name": "export job", "entityType": "job"}, {"name": "disk", "entityType": "thing"}]},
    )
    await rest.post(
        "/api/v1/graph/relations",
        json={"relations": [{"from": "export job", "to": "disk", "relationType": "writes to"}]},
    )
    paths = [
        "/ui/memory?q=export+failed",
        "/ui/thoughts",
        "/ui/graph?q=export",
        "/ui/graph/entities/export%20job",
        "/ui/analysis",
        "/ui/datasets",
        "/ui/admin/audit",
        f"/ui/memory/items/{memory_id}",
    ]
    async with new_page(browser) as page:
        problems: list[str] = []
        page.on(
            "console",
            lambda msg: problems.append(f"{page.url}: {msg.text[:160]}") if msg.type in ("error", "warning") else None,
        )
        page.on("pageerror", lambda exc: problems.append(f"{page.url}: {exc}"))
        await sign_in(page, server.url, ADMIN_KEY)
        for path in paths:
            answer = await page.goto(f"{server.url}{path}")
            assert answer is not None and answer.status == 200, path
        await page.goto(f"{server.url}/ui/graph/entities/export%20job")
        await expect(page.locator("[data-graph]")).to_have_attribute("data-ready", "2")
        assert problems == []
    # At a phone's width no page is wider than the screen (wide tables scroll inside their box).
    async with new_page(browser, PHONE) as page:
        await sign_in(page, server.url, ADMIN_KEY)
        for path in paths:
            await page.goto(f"{server.url}{path}")
            width = await page.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], (path, width)
