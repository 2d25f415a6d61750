"""The console's analysis pages in a real headless Chromium: the sessions list, a session (ingest
ranges, findings, page summaries), describe and aggregate (table and chart), an act with what
succeeded and failed, and a project-bound key kept to its project."""

from __future__ import annotations

import base64
from collections import Counter
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from tests.support import analysis as analysis_helpers
from tests.support.analysis import N_BOOKS, Upstream, expected_books
from tests.support.browser import PHONE, new_page, shot, sign_in
from tests.support.server import ADMIN_KEY, BOUND_PROJECT, PROJECT_KEY, READ_KEY, RunningServer

pytestmark = pytest.mark.slow
upstream = analysis_helpers.upstream
bookshelf = analysis_helpers.bookshelf

AID = "shelf-review"


async def _seed(rest: httpx.AsyncClient, aid: str = AID, project: str | None = None) -> dict[str, Any]:
    """Every book (6 pages of 100) and one persistent finding, over REST."""
    where = {"project": project} if project else {}
    r = await rest.post(
        "/api/v1/analysis/ingest",
        json={"analysis_id": aid, "model": "book", "ingest_all": True, "per_page": 100, **where},
    )
    assert r.status_code == 200, r.text
    ingest: dict[str, Any] = r.json()
    assert ingest["stored"] == N_BOOKS and ingest["complete"]
    r = await rest.post(
        "/api/v1/analysis/store",
        json={
            "analysis_id": aid,
            "persistent": True,
            "findings": [{"finding": "Unrated books cluster in poetry", "category": "pattern", "metadata": {"n": 7}}],
            **where,
        },
    )
    assert r.status_code == 200, r.text
    return ingest


async def _png_size(page: Page, selector: str) -> tuple[int, int]:
    """The natural size of a data: PNG image on the page (0, 0 when it did not decode)."""
    img = page.locator(selector)
    await expect(img).to_have_count(1)
    src = await img.get_attribute("src")
    assert src is not None and src.startswith("data:image/png;base64,")
    raw = base64.b64decode(src.split(",", 1)[1])
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    size = await img.evaluate("i => [i.naturalWidth, i.naturalHeight]")
    return int(size[0]), int(size[1])


async def test_sessions_list_and_a_session_with_describe_and_aggregate(
    server: RunningServer, browser: Browser, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    await _seed(rest)
    books = expected_books()
    async with new_page(browser) as page:
        await sign_in(page, server.url, ADMIN_KEY, "/ui/analysis")
        row = page.locator(f"#sessions tr[data-session='{AID}']")
        await expect(row).to_contain_text(f"book: {N_BOOKS} · p. 1\u20136")
        cells = [c.strip() for c in await row.locator("td").all_inner_texts()]
        assert cells[2:6] == [str(N_BOOKS), "1", "6", "6"], cells  # records, findings, page summaries, pages
        await shot(page, "analysis-sessions")

        await row.locator("a", has_text=AID).click()
        await page.wait_for_url(f"**/ui/analysis/sessions/{AID}")
        await expect(page.locator("h1")).to_contain_text(AID)
        await expect(page.locator("#models")).to_contain_text(str(N_BOOKS))
        ingests = page.locator("#ingests tbody tr")
        await expect(ingests).to_have_count(1)
        await expect(ingests).to_contain_text('"per_page": 100')
        assert [c.strip() for c in await ingests.locator("td").all_inner_texts()][3:6] == ["6", "yes", str(N_BOOKS)]
        await expect(page.locator("#findings-list")).to_contain_text("Unrated books cluster in poetry")
        await expect(page.locator("#findings-list")).to_contain_text("persistent")
        await expect(page.locator("#summaries-list li")).to_have_count(6)
        await expect(page.locator("#summaries-list li").first).to_contain_text("book · page 1")

        # describe: the fields as a table
        await page.select_option("select[name=mode]", "describe")
        await page.click("form[aria-label='Query the session'] button[type=submit]")
        describe = page.locator("#query-result table.describe")
        await expect(describe).to_have_count(1)
        await expect(describe.locator("thead")).to_contain_text("field")
        status = describe.locator("tr", has_text="status")
        await expect(status).to_contain_text("completed")

        # aggregate: the groups as a table and a bar chart
        await page.select_option("select[name=mode]", "aggregate")
        await page.fill("input[name=group_by]", "status")
        await page.click("form[aria-label='Query the session'] button[type=submit]")
        result = page.locator("#query-result")
        await expect(result).to_contain_text(f'Distribution of "status" ({N_BOOKS} total')
        want = Counter(b["status"] for b in books)
        rows = await result.locator("table tbody tr").all_inner_texts()
        got = [(r.split("\t")[0].strip(), int(r.split("\t")[1])) for r in rows]
        assert got == want.most_common(), got
        width, height = await _png_size(page, "#query-result figure.chart img")
        assert width > 200 and height > 50
        await shot(page, "analysis-session")

        # filter with a where: the rows as a table
        await page.select_option("select[name=mode]", "filter")
        await page.fill("input[name=where]", '{"status": "completed", "rating": {"$lt": 2}}')
        await page.click("form[aria-label='Query the session'] button[type=submit]")
        low = [b for b in books if b["status"] == "completed" and b["rating"] is not None and b["rating"] < 2]
        await expect(result).to_contain_text(f"{len(low)} matching record(s)")
        await expect(result.locator("table tbody tr")).to_have_count(min(20, len(low)))

        # a query the session cannot answer shows its error next to the form
        await page.select_option("select[name=mode]", "aggregate")
        await page.fill("input[name=group_by]", "not a field!")
        await page.fill("input[name=where]", "")
        await page.click("form[aria-label='Query the session'] button[type=submit]")
        await expect(page.locator("[role=alert]")).to_contain_text("4001")

        # A form posted without this session's token (a cross-site request) is refused: nothing is cleared.
        forged = await page.request.post(
            f"{server.url}/ui/analysis/sessions/{AID}/clear", form={"project": ""}, headers={"Origin": server.url}
        )
        assert forged.status == 403 and "security token" in await forged.text()
        r = await rest.get(f"/api/v1/analysis/sessions/{AID}")
        assert r.status_code == 200 and r.json()["records"] == N_BOOKS


async def test_act_results_show_what_succeeded_and_failed(
    server: RunningServer, browser: Browser, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    await _seed(rest)
    books = expected_books()
    locked = next(b["id"] for b in books if b["locked"] and b["id"] > 3)
    scope = [b for b in books if locked - 2 <= b["id"] <= locked + 2]
    refused = sum(1 for b in scope if b["locked"])
    where = f'{{"id": {{"$gte": {locked - 2}, "$lte": {locked + 2}}}}}'
    asked: list[str] = []

    async def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        await dialog.accept()

    async with new_page(browser) as page:
        await sign_in(page, server.url, ADMIN_KEY, f"/ui/analysis/sessions/{AID}")
        page.on("dialog", answer)
        form = page.locator("#act-form")
        await form.locator("select[name=action]").select_option("update")
        await form.locator("input[name=where]").fill(where)
        await form.locator("input[name=attributes]").fill('{"status": "reading"}')
        await form.locator("button[type=submit]").click()
        act = page.locator("#act-result")
        await expect(act).to_contain_text(f"Dry run: update would apply to {len(scope)} book record(s)")
        assert bookshelf.stats()["requests"].get(f"/api/books/{locked}") is None  # a dry run sends nothing
        # A dry run is asked as one ("nothing is sent"); the sending act below, as a change upstream.
        assert len(asked) == 1 and "dry run" in asked[0].lower() and "nothing is sent" in asked[0].lower(), asked
        # The result is above the page summaries, in view without scrolling, its values in JSON's words.
        outcome = await page.locator("#act-outcome").bounding_box()
        summaries = await page.locator("#summaries-list").bounding_box()
        assert outcome is not None and summaries is not None and outcome["y"] < summaries["y"]
        assert await page.evaluate("document.querySelector('#act-outcome').getBoundingClientRect().top") < 860
        sample = await act.locator("table").first.inner_text()
        assert "false" in sample and "False" not in sample and "None" not in sample, sample
        await shot(page, "analysis-act-dry-run")

        await form.locator("input[name=dry_run]").uncheck()
        await form.locator("button[type=submit]").click()
        summary = page.locator("#act-summary tbody td")
        await expect(summary.first).to_have_text("update")
        cells = [c.strip() for c in await summary.all_inner_texts()]
        assert cells[1:3] == [str(len(scope)), str(len(scope) - refused)], cells
        assert cells[4] == str(refused), cells
        await expect(act.locator("table").nth(1)).to_contain_text(str(locked))  # the first failures
        await expect(act).to_contain_text("409")
        assert len(asked) == 2 and "send this change to the upstream" in asked[1].lower(), asked
        await shot(page, "analysis-act")

    # The session's copy follows what the upstream accepted.
    r = await rest.post(
        "/api/v1/analysis/query",
        json={"analysis_id": AID, "mode": "filter", "where": {"id": {"$gte": locked - 2, "$lte": locked + 2}}},
    )
    rows = r.json()["rows"]
    assert sorted(row["status"] == "reading" for row in rows) == sorted(not b["locked"] for b in scope)


async def test_a_bound_key_sees_its_project_only_and_a_read_key_cannot_act(
    server: RunningServer, browser: Browser, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    await _seed(rest, "default-only")
    await _seed(rest, "bound-session", project=BOUND_PROJECT)
    async with new_page(browser, PHONE) as page:
        await sign_in(page, server.url, PROJECT_KEY, "/ui/analysis")
        await expect(page.locator("#sessions")).to_contain_text("bound-session")
        await expect(page.locator("#sessions")).not_to_contain_text("default-only")
        await expect(page.locator("input[name=project]").first).to_have_attribute("readonly", "")
        await shot(page, "analysis-sessions-phone")
        await page.goto(f"{server.url}/ui/analysis/sessions/default-only?project=default")
        await expect(page.locator("[role=alert]")).to_contain_text("4030")
        await page.goto(f"{server.url}/ui/analysis/sessions/default-only")
        await expect(page.locator("[role=alert]")).to_contain_text("Error 4002 (Not Found)")
    async with new_page(browser) as page:
        await sign_in(page, server.url, READ_KEY, "/ui/analysis/sessions/default-only")
        await expect(page.locator("#models")).to_contain_text(str(N_BOOKS))
        await expect(page.locator("#act-form")).to_have_count(0)
        await expect(page.locator("#act")).to_be_visible()
