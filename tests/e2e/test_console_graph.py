"""The console's graph pages in a real headless Chromium: search with the limbic score components, an
entity page with its observations, relations, reflections and neighbourhood graph, superseding an
observation (audited as a console write), and the search-quality chart."""

from __future__ import annotations

import httpx
import pytest
from playwright.async_api import Browser, expect

from tests.support.browser import PHONE, new_page, shot, sign_in
from tests.support.graph import API, PEOPLE
from tests.support.server import ADMIN_KEY, BOUND_PROJECT, PROJECT_KEY, READ_KEY, RunningServer

pytestmark = pytest.mark.slow


async def _seed(rest: httpx.AsyncClient) -> None:
    r = await rest.post(f"{API}/entities", json={"entities": PEOPLE})
    assert r.status_code == 200, r.text
    r = await rest.post(
        f"{API}/relations",
        json={
            "relations": [
                {"from": "Ada Lovelace", "to": "Charles Babbage", "relationType": "worked with"},
                {"from": "Charles Babbage", "to": "Analytical Engine", "relationType": "designed"},
            ]
        },
    )
    assert r.status_code == 200, r.text
    r = await rest.post(
        f"{API}/reflections",
        json={
            "target_type": "entity",
            "target_name": "Charles Babbage",
            "content": "Babbage keeps coming up whenever early computing is discussed",
            "author": "ops",
        },
    )
    assert r.status_code == 200, r.text


async def test_search_open_supersede_and_audit(
    server: RunningServer, browser: Browser, rest: httpx.AsyncClient
) -> None:
    await _seed(rest)
    async with new_page(browser) as page:
        await sign_in(page, server.url, ADMIN_KEY, "/ui/graph")
        await expect(page.locator("#graph-stats")).to_contain_text("4 (")
        await expect(page.locator("#entities")).to_contain_text("Sourdough")
        # Search by meaning: each hit shows its score components.
        await page.fill("input[name=q]", "designed the analytical engine")
        await page.select_option("select[name=mode]", "semantic")
        await page.click("form[role=search] button[type=submit]")
        hits = page.locator("#hits > li")
        await expect(hits.first).to_be_visible()
        babbage = hits.filter(has=page.locator("a > strong", has_text="Charles Babbage"))
        await expect(babbage).to_have_count(1)
        for signal in ("limbic_score", "cosine_sim", "text_score", "importance", "temporal", "cooc_boost"):
            await expect(babbage.locator(f"[data-signal={signal}]")).to_have_count(1)
        await expect(babbage.locator(".signals")).to_contain_text("baseline")
        await expect(page.locator("main")).not_to_contain_text("Sourdough")
        await shot(page, "graph-search")
        # Search by text.
        await page.fill("input[name=q]", "mechanical")
        await page.select_option("select[name=mode]", "nodes")
        await page.click("form[role=search] button[type=submit]")
        await expect(page.locator("#hits > li")).to_have_count(1)
        await expect(page.locator("#hits")).to_contain_text("Analytical Engine")
        # Back to the meaning search and open an entity from it.
        await page.go_back()
        await page.locator("#hits a > strong", has_text="Charles Babbage").click()
        await expect(page.locator("h1")).to_have_text("Charles Babbage")
        await expect(page.locator("#entity-facts")).to_contain_text("person")
        await expect(page.locator("#observations")).to_contain_text("Mathematician from London")
        await expect(page.locator("#relations-out")).to_contain_text("designed → Analytical Engine")
        await expect(page.locator("#relations-in")).to_contain_text("Ada Lovelace → worked with")
        await expect(page.locator("#reflections")).to_contain_text("early computing")
        # The neighbourhood is drawn (console.js sets data-ready to the node count) and listed.
        await expect(page.locator("div.graph")).to_have_attribute("data-ready", "3")
        assert await page.locator("div.graph canvas").count() > 0
        await expect(page.locator("#neighbours li")).to_have_count(2)
        await shot(page, "graph-entity")
        # Supersede an observation: the old text moves to the history, struck out, with what replaced it.
        item = page.locator("#observations > li", has_text="Mathematician from London")
        await item.locator("summary").click()
        await item.locator("textarea").fill("Mathematician and inventor from London")
        await item.locator("button", has_text="Supersede").click()
        await expect(page.locator(".flash")).to_contain_text("superseded by")
        await expect(page.locator("#observations")).to_contain_text("Mathematician and inventor from London")
        await expect(page.locator("#observations")).not_to_contain_text("Mathematician from London")
        old = page.locator("#history > li", has_text="Mathematician from London")
        await expect(old.locator(".superseded")).to_have_text("Mathematician from London")
        await expect(old).to_contain_text("by #")
        await expect(old).to_contain_text("Mathematician and inventor from London")
        # Add an observation and set the status.
        await page.fill("#add-content", "Proposed the Difference Engine")
        await page.click("#add-observation button[type=submit]")
        await expect(page.locator(".flash")).to_contain_text("Observation added")
        await expect(page.locator("#observations")).to_contain_text("Proposed the Difference Engine")
        await page.fill("input[name=status]", "archivado")
        await page.click("text=Set status")
        await expect(page.locator(".flash")).to_contain_text("Status set to archived (was active)")
        await expect(page.locator("#entity-status")).to_have_text("archived")
        await shot(page, "graph-entity-history")
        # The writes went through the executor: REST sees them, and the audit log names the console.
        history = (await rest.get(f"{API}/entities/history", params={"entity_name": "Charles Babbage"})).json()
        assert [o["content"] for o in history["observations"] if o["superseded_at"]] == ["Mathematician from London"]
        await page.goto(f"{server.url}/ui/admin/audit?operation=supersede_observation")
        row = page.locator("#audit tbody tr")
        await expect(row).to_have_count(1)
        await expect(row).to_contain_text("console")
        await page.goto(f"{server.url}/ui/admin/audit?operation=set_entity_status")
        await expect(page.locator("#audit tbody tr")).to_contain_text("console")
        # The quality report: the search above was followed by opening Babbage (implicit feedback).
        await page.goto(f"{server.url}/ui/graph/quality")
        image = page.locator("figure.chart img")
        await expect(image).to_have_count(1)
        assert (await image.get_attribute("src") or "").startswith("data:image/png;base64,")
        assert await image.evaluate("img => img.complete && img.naturalWidth > 100")
        assert "NDCG@10" in (await image.get_attribute("alt") or "")
        await expect(page.locator("#quality")).to_contain_text("limbic")
        await expect(page.locator("#quality tbody tr")).to_have_count(2)
        await shot(page, "graph-quality")


async def test_entity_page_at_phone_width_and_for_a_read_key(
    server: RunningServer, browser: Browser, rest: httpx.AsyncClient
) -> None:
    await _seed(rest)
    async with new_page(browser, PHONE) as page:
        await sign_in(page, server.url, READ_KEY, "/ui/graph/entities/Ada%20Lovelace")
        await expect(page.locator("h1")).to_have_text("Ada Lovelace")
        await expect(page.locator("div.graph")).to_have_attribute("data-ready", "2")
        # A read key sees the page but no form that writes.
        await expect(page.locator("form[action$='/supersede']")).to_have_count(0)
        await expect(page.locator("#add-observation")).to_have_count(0)
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], width
        await shot(page, "graph-entity-phone")
        # Neighbours are plain links (no script needed): open Babbage from the list.
        await page.locator("#neighbours a", has_text="Charles Babbage").click()
        await expect(page.locator("h1")).to_have_text("Charles Babbage")
        # An unknown entity is a not-found page.
        await page.goto(f"{server.url}/ui/graph/entities/No%20such%20thing")
        await expect(page.locator("[role=alert]")).to_contain_text("No such thing")


async def test_a_project_bound_key_sees_only_its_project(
    server: RunningServer, browser: Browser, rest: httpx.AsyncClient
) -> None:
    await _seed(rest)  # in the default project
    r = await rest.post(
        f"{API}/entities",
        json={"project": BOUND_PROJECT, "entities": [{"name": "Bound/thing #1?", "entityType": "note"}]},
    )
    assert r.status_code == 200, r.text
    async with new_page(browser) as page:
        await sign_in(page, server.url, PROJECT_KEY, "/ui/graph")
        await expect(page.locator("#entities")).not_to_contain_text("Ada Lovelace")
        await page.locator("#entities a", has_text="Bound/thing #1?").click()  # any name makes a working link
        await expect(page.locator("h1")).to_have_text("Bound/thing #1?")
        await page.goto(f"{server.url}/ui/graph/entities/Ada%20Lovelace")
        await expect(page.locator("[role=alert]")).to_contain_text("Ada Lovelace")
        await page.goto(f"{server.url}/ui/graph?project=default")
        await expect(page.locator("[role=alert]")).to_contain_text("4030")
