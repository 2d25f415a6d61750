"""Browsing the console by project in a real headless Chromium, at a laptop's and a phone's width: an
agent pushes a note over MCP into a project that is not `default`; the user, signed in, finds it from
the home page by clicking only (the project picker, the project's tallies, the memory), and the chosen
project stays chosen across the sections."""

from __future__ import annotations

import json
import uuid

import pytest
from playwright.async_api import Browser, FilePayload, expect

from tests.support.browser import LAPTOP, PHONE, new_page, shot, sign_in
from tests.support.server import ADMIN_KEY, RunningServer, mcp_client, text_of

pytestmark = pytest.mark.slow

PROJECT = "team-notes"
NOTE = "Standup: the billing export moves to Thursdays from next week; Dana owns the migration."


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["laptop", "phone"])
async def test_an_agents_note_is_found_from_the_home_page_by_clicking(
    server: RunningServer, browser: Browser, viewport: dict[str, int]
) -> None:
    phone = viewport == PHONE
    async with new_page(browser, viewport) as page:
        await sign_in(page, server.url, ADMIN_KEY, "/ui/")
        # An agent stores a note over MCP while the console is open.
        async with mcp_client(server.url) as session:
            pushed = await session.call_tool(
                "push", {"text": NOTE, "project_id": PROJECT, "tags": ["standup"], "wait_for_embedding": True}
            )
            assert not pushed.is_error, text_of(pushed)
            assert json.loads(text_of(pushed))["inserted"] == 1

        # From here on, clicks only: back to the home page, pick the project, open the newest memory.
        await page.locator("a.brand").click()
        await expect(page.locator("h1")).to_contain_text("default")
        if phone:
            await page.locator("#projects a", has_text=PROJECT).click()
        else:
            await page.locator("#project-choice").select_option(PROJECT)  # the picker sends itself
        await expect(page.locator("h1")).to_contain_text(PROJECT)
        memories = page.locator("#tallies li[data-tally=Memories]")
        await expect(memories.locator(".count")).to_have_text("1")
        await expect(page.locator("#tallies li[data-tally=Thoughts] .count")).to_have_text("0")
        await expect(page.locator("#tallies li[data-tally=Entities] .count")).to_have_text("0")
        await expect(memories.locator("ol li")).to_contain_text("pushed")
        assert await page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
        await shot(page, "home-project-phone" if phone else "home-project")
        await memories.locator("ol li a").first.click()
        await expect(page.locator("#memory-text")).to_have_text(NOTE)
        await expect(page.locator("#memory-facts")).to_contain_text(PROJECT)
        await expect(page.locator("#memory-tags")).to_contain_text("standup")
        await shot(page, "memory-item-from-home-phone" if phone else "memory-item-from-home")

        # The project stays chosen in every section reached through the navigation.
        await page.locator("header nav a", has_text="Memories").click()
        await expect(page.locator("#list-summary")).to_contain_text(f"1 memory in project {PROJECT}")
        await expect(page.locator("#memories > li")).to_contain_text("Dana owns the migration")
        await shot(page, "memory-list-phone" if phone else "memory-list")
        await page.locator("header nav a", has_text="Graph").click()
        await expect(page.locator("h1")).to_have_text(f"Graph · {PROJECT}")
        await page.locator("header nav a", has_text="Datasets").click()
        await expect(page.locator("h1")).to_have_text(f"Datasets · {PROJECT}")
        await expect(page.locator("#project-choice")).to_have_value(PROJECT)
        assert await page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
        # The upload form: a file from the browser becomes a dataset of the chosen project.
        upload = page.locator("#upload")
        dataset = f"standups_{uuid.uuid4().hex[:8]}"  # files outlive the tables emptied between tests
        await upload.locator("input[name=name]").fill(dataset)
        csv = b"day,attendees\nMon,5\nThu,7\n"
        payload: FilePayload = {"name": "standups.csv", "mimeType": "text/csv", "buffer": csv}
        await upload.locator("input[name=file]").set_input_files(files=[payload])
        await upload.locator("button[type=submit]").click()
        await expect(page.locator(".flash")).to_contain_text(f"Uploaded {len(csv)} bytes as dataset {dataset}")
        await expect(page.locator(f"#datasets tr[data-dataset={dataset}]")).to_contain_text("csv")
        await shot(page, "datasets-upload-phone" if phone else "datasets-upload")


async def test_every_section_fits_a_phone(server: RunningServer, browser: Browser) -> None:
    """Each section's first page, with the picker in the header, is no wider than a phone's screen."""
    async with new_page(browser, PHONE) as page:
        await sign_in(page, server.url, ADMIN_KEY, f"/ui/?project={PROJECT}")
        for path in (
            "/ui/memory",
            "/ui/thoughts",
            "/ui/graph",
            "/ui/graph/quality",
            "/ui/analysis",
            "/ui/datasets",
            "/ui/datasets/query",
            "/ui/admin",
            "/ui/admin/audit",
            "/ui/admin/health",
            "/ui/admin/settings",
        ):
            await page.goto(f"{server.url}{path}")
            await expect(page.locator("#project-choice")).to_have_value(PROJECT)
            width = await page.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], (path, width)
