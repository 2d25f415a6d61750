"""The console's memory pages in a real headless Chromium: search in each mode with every hit's
signals, a memory's page (chunks, vectors), retagging seen in the audit log, deleting, summarizing a
window, the thoughts page with its facets and a thought's page, and what read and project-bound keys
are refused."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from tests.support.browser import PHONE, new_page, shot, sign_in
from tests.support.memory import api
from tests.support.server import ADMIN_KEY, BOUND_PROJECT, PROJECT_KEY, READ_KEY, RunningServer

pytestmark = pytest.mark.slow

NOTES = [
    ("The deployment of version 2.3 failed because the database migration timed out.", ["deploy", "ops"]),
    ("We rolled back the release and raised the statement timeout to sixty seconds.", ["deploy"]),
    ("Lunch with the design team: they want a darker theme for the dashboard.", ["design"]),
    ("Octopuses have three hearts and blue blood.", ["trivia"]),
]
RUNBOOK = """Database failover runbook. When the primary stops answering health checks for more than thirty \
seconds, the on-call engineer confirms the outage from two regions before acting. A single failed probe is \
usually a network blip, and promoting a replica by mistake splits the cluster. Check the replication lag on \
every replica first: the one with the smallest lag becomes the new primary, and its lag tells you how much \
recent work may be lost. Write the lag down in the incident channel before going further.

Replica promotion. Stop the connection pooler so that no client writes to the old primary while it is still \
half alive. Promote the chosen replica with the control tool, then wait until it reports itself as primary and \
accepts writes. Point the pooler at the new primary, start it again, and watch the error rate of the API for \
five minutes. Expect a short burst of failed requests while clients reconnect; it should fade within a minute.

Afterwards. Rebuild the old primary as a replica from a fresh base backup rather than rewinding it, because a \
rewind after an unclean stop has corrupted pages twice before. Record the timeline, the replication lag at the \
time of promotion and the number of failed requests in the postmortem. Schedule a failover drill every quarter \
so that the runbook stays true and every engineer on the rotation has promoted a replica at least once."""
THOUGHTS: list[tuple[str, dict[str, Any]]] = [
    (
        "Alice suggested caching the model in the image to speed up cold starts.",
        {"type": "idea", "topics": ["performance"], "people": ["Alice"]},
    ),
    ("Bob will rotate the API keys on Friday.", {"type": "task", "topics": ["security"], "people": ["Bob"]}),
    (
        "Cold starts take twelve seconds because the model downloads at boot.",
        {"type": "observation", "topics": ["performance"]},
    ),
]


async def seed(rest: httpx.AsyncClient, project: str = "console") -> dict[str, str]:
    """Push the notes (one memory each) and return their ids by text."""
    for text, tags in NOTES:
        out = await api(
            rest,
            "/memory/push",
            {"text": text, "project": project, "type": "episodic", "tags": tags, "wait_for_embedding": True},
        )
        assert out["inserted"] == 1 and out["embedding"] == "done"
    page = await api(rest, "/thoughts", {"project": project}, method="GET")
    return {t["content"]: t["id"] for t in page["thoughts"]}


async def search(page: Page, base: str, query: str, mode: str, project: str = "console") -> None:
    await page.goto(f"{base}/ui/memory")
    await page.fill("input[name=q]", query)
    await page.select_option("select[name=mode]", mode)
    await page.fill("input[name=project]", project)
    await page.click("#memory-search button[type=submit]")
    await expect(page.locator("#search-summary")).to_contain_text(f"{mode} search")


async def test_search_open_retag_audit_and_delete(
    server: RunningServer, browser: Browser, rest: httpx.AsyncClient
) -> None:
    ids = await seed(rest)
    deploy = ids[NOTES[0][0]]
    async with new_page(browser) as page:
        await sign_in(page, server.url, ADMIN_KEY, "/ui/memory")
        await expect(page.locator("header nav")).to_contain_text("Memories")
        # Hybrid: the hit carries both signals (cosine and lexical coverage) and its text.
        await search(page, server.url, "database migration timed out", "hybrid")
        first = page.locator("#hits > li").first
        await expect(first).to_have_attribute("data-id", deploy)
        await expect(first).to_contain_text("database migration timed out")
        await expect(first.locator(".signals")).to_contain_text("cosine")
        await expect(first.locator(".signals")).to_contain_text("lexical coverage")
        await expect(first.locator(".tag", has_text="deploy")).to_be_visible()
        await shot(page, "memory-search")
        # Semantic: cosine only; lexical: coverage only, and a filter on tags.
        await search(page, server.url, "octopus anatomy", "semantic")
        await expect(page.locator("#hits > li").first).to_contain_text("three hearts")
        assert "lexical coverage" not in await page.locator("#hits").inner_text()
        await search(page, server.url, "migration", "lexical")
        await page.fill("input[name=tags]", "ops")
        await page.click("#memory-search button[type=submit]")
        hits = page.locator("#hits > li")
        await expect(hits).to_have_count(1)
        await expect(hits.first).to_have_attribute("data-id", deploy)
        assert "cosine" not in await hits.first.inner_text()

        # Open the memory: its text, tags, chunk and vector status.
        await hits.first.locator("a").first.click()
        await expect(page).to_have_url(f"{server.url}/ui/memory/items/{deploy}")
        await expect(page.locator("#memory-text")).to_contain_text("version 2.3")
        await expect(page.locator("#memory-tags")).to_contain_text("deploy")
        await expect(page.locator("#embeddings")).to_contain_text("1 of 1")
        await expect(page.locator("#embeddings")).to_contain_text("active")
        # Retag it; the page shows the new tags and the audit log the console's call.
        await page.fill("#tags", "incident, postmortem")
        await page.click("#retag button[type=submit]")
        await expect(page.locator(".flash")).to_contain_text("incident, postmortem")
        await expect(page.locator("#memory-tags .tag")).to_have_text(["incident", "postmortem"])
        got = await api(rest, f"/memory/items/{deploy}", method="GET")
        assert got["memory"]["tags"] == ["incident", "postmortem"]
        await page.goto(f"{server.url}/ui/admin/audit?operation=update_memory")
        row = page.locator("#audit tbody tr").first
        await expect(row).to_contain_text("update_memory")
        await expect(row).to_contain_text("console")
        await expect(row).to_contain_text("ok")

        # A document pushed in several chunks: its page lists them in order, each with its vectors.
        runbook = await api(
            rest,
            "/memory/push",
            {
                "text": RUNBOOK,
                "project": "console",
                "source_uri": "docs/runbook.md",
                "tags": ["runbook"],
                "wait_for_embedding": True,
            },
        )
        chunks = runbook["chunksIndexed"]
        assert chunks >= 2
        await search(page, server.url, "failover replica promotion", "hybrid")
        await page.locator("#hits > li a", has_text="docs/runbook.md").first.click()
        await expect(page.locator("#memory-facts")).to_contain_text(f"of {chunks}")
        await expect(page.locator("#chunks > li")).to_have_count(chunks)
        await expect(page.locator("#chunks > li[aria-current]")).to_contain_text("this memory")
        await expect(page.locator("#embeddings")).to_contain_text(f"{chunks} of {chunks}")
        await shot(page, "memory-item")

        # Delete another memory (confirming the question); it is gone from search and REST.
        trivia = ids[NOTES[3][0]]
        await page.goto(f"{server.url}/ui/memory/items/{trivia}")
        page.once("dialog", lambda dialog: dialog.accept())
        await page.click("#delete button[type=submit]")
        await expect(page.locator(".flash")).to_contain_text("Deleted 1 memory")
        await expect(page).to_have_url(f"{server.url}/ui/memory")
        err = await api(rest, f"/memory/items/{trivia}", method="GET", status=404)
        assert err["error"]["code"] == 4002


async def test_summarize_a_window(server: RunningServer, browser: Browser, rest: httpx.AsyncClient) -> None:
    ids = await seed(rest)
    async with new_page(browser) as page:
        await sign_in(page, server.url, ADMIN_KEY, "/ui/memory/summarize")
        await page.fill("#summarize input[name=project]", "console")
        await page.select_option("#summarize select[name=strategy]", "extractive")
        await page.click("#summarize button[type=submit]")
        summary = page.locator("#summary")
        await expect(summary).to_contain_text("extractive")
        await expect(summary).to_contain_text("Sources (4)")
        for mid in ids.values():
            await expect(summary.locator(f"a[href='/ui/memory/items/{mid}']")).to_have_count(1)
        await shot(page, "memory-summarize")
        # The stored summary opens as a memory.
        await summary.locator("a", has_text="memory ").click()
        await expect(page.locator("#memory-facts")).to_contain_text("summary")


async def test_thoughts_facets_and_a_thought(server: RunningServer, browser: Browser, rest: httpx.AsyncClient) -> None:
    made = await capture(rest)
    async with new_page(browser) as page:
        await sign_in(page, server.url, ADMIN_KEY, "/ui/thoughts")
        facets = page.locator("#facets")
        await expect(facets).to_contain_text("3 in all")
        await expect(facets.locator("a[data-facet=topic]", has_text="performance")).to_contain_text("2")
        await expect(page.locator("#thoughts > li")).to_have_count(3)
        await shot(page, "thoughts")
        # A facet filters the list; clicking it again drops the filter.
        await facets.locator("a[data-facet=topic]", has_text="performance").click()
        await expect(page.locator("#thoughts > li")).to_have_count(2)
        await expect(page.locator("#active-filters")).to_contain_text("topic = performance")
        await facets.locator("a[data-facet=type]", has_text="task").click()
        await expect(page.locator("#thoughts > li")).to_have_count(0)
        await page.locator("#active-filters a", has_text="clear").click()
        await expect(page.locator("#thoughts > li")).to_have_count(3)
        # Search with signals, then open a thought: its related ones.
        await page.fill("#thought-search input[name=q]", "cold starts")
        await page.click("#thought-search button[type=submit]")
        await expect(page.locator("#thoughts > li").first).to_contain_text("Cold starts")
        await expect(page.locator("#thoughts .signals").first).to_contain_text("cosine")
        await page.locator("#thoughts > li a", has_text="Cold starts take").click()
        await expect(page.locator("#thought-text")).to_contain_text("twelve seconds")
        await expect(page.locator("#related")).to_contain_text("Alice suggested")
        await shot(page, "thoughts-thought")
        # Edit its topics, archive it, delete another.
        await page.fill("#topics", "performance, boot")
        await page.click("#edit button[type=submit]")
        await expect(page.locator(".flash")).to_contain_text("saved")
        await expect(page.locator("#thought-facts")).to_contain_text("boot")
        await page.click("#archive button[type=submit]")
        await expect(page.locator(".flash")).to_contain_text("archived")
        await expect(page.locator("#archive button")).to_have_text("Restore")
        await page.goto(f"{server.url}/ui/thoughts/{made[1]}")
        page.once("dialog", lambda dialog: dialog.accept())
        await page.click("#delete button[type=submit]")
        await expect(page.locator(".flash")).to_contain_text("deleted")
        await expect(page.locator("#facets")).to_contain_text("2 in all · 1 active · 1 archived")
    got = await api(rest, f"/thoughts/{made[2]}", method="GET")
    assert got["thought"]["metadata"]["topics"] == ["performance", "boot"] and got["thought"]["archived"] is True
    assert got["thought"]["metadata"]["type"] == "observation"


async def capture(rest: httpx.AsyncClient) -> list[str]:
    made = []
    for content, meta in THOUGHTS:
        out = await api(
            rest, "/thoughts", {"content": content, "project": "ideas", "metadata": meta, "wait_for_embedding": True}
        )
        made.append(out["thought"]["id"])
    return made


async def test_thoughts_at_phone_width(server: RunningServer, browser: Browser, rest: httpx.AsyncClient) -> None:
    await seed(rest)
    await capture(rest)
    async with new_page(browser, PHONE) as page:
        await sign_in(page, server.url, ADMIN_KEY, "/ui/thoughts?project=ideas")
        await expect(page.locator("#thoughts > li")).to_have_count(len(THOUGHTS))
        await expect(page.locator("#facets")).to_contain_text("Alice")
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], width
        await shot(page, "thoughts-phone")
        await search(page, server.url, "dashboard theme", "hybrid")
        await expect(page.locator("#hits > li").first).to_contain_text("darker theme")
        assert await page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        await shot(page, "memory-search-phone")


async def test_a_read_key_is_refused_a_retag(server: RunningServer, browser: Browser, rest: httpx.AsyncClient) -> None:
    ids = await seed(rest)
    mid = ids[NOTES[2][0]]
    async with new_page(browser) as page:
        await sign_in(page, server.url, READ_KEY, f"/ui/memory/items/{mid}")
        await expect(page.locator("#memory-text")).to_contain_text("darker theme")
        # The page offers no form to this key; a form sent anyway (with the session's token) is refused.
        await expect(page.locator("#retag")).to_have_count(0)
        csrf = await page.locator("input[name=csrf]").first.get_attribute("value")
        await page.evaluate(
            """([action, csrf]) => {
                const form = document.createElement("form");
                form.method = "post";
                form.action = action;
                for (const [name, value] of [["csrf", csrf], ["tags", "hacked"]]) {
                    const input = document.createElement("input");
                    input.type = "hidden"; input.name = name; input.value = value;
                    form.appendChild(input);
                }
                document.body.appendChild(form);
                form.submit();
            }""",
            [f"/ui/memory/items/{mid}/tags", csrf],
        )
        await expect(page.locator("[role=alert]")).to_contain_text("4030")
        await shot(page, "memory-refused-read-key")
    got = await api(rest, f"/memory/items/{mid}", method="GET")
    assert got["memory"]["tags"] == ["design"]


async def test_a_project_bound_key_cannot_open_another_projects_memory(
    server: RunningServer, browser: Browser, rest: httpx.AsyncClient
) -> None:
    foreign = await seed(rest, "console")
    own = await seed(rest, BOUND_PROJECT)
    async with new_page(browser) as page:
        await sign_in(page, server.url, PROJECT_KEY, f"/ui/memory/items/{own[NOTES[0][0]]}")
        await expect(page.locator("#memory-facts")).to_contain_text(BOUND_PROJECT)
        await page.goto(f"{server.url}/ui/memory/items/{foreign[NOTES[0][0]]}")
        await expect(page.locator("[role=alert]")).to_contain_text("4002")
        assert "version 2.3" not in await page.content()
        # Its searches stay in its project; naming another is refused in place.
        await search(page, server.url, "database migration", "hybrid", project=BOUND_PROJECT)
        await expect(page.locator("#hits > li").first).to_have_attribute("data-id", own[NOTES[0][0]])
        await page.fill("input[name=project]", "console")
        await page.click("#memory-search button[type=submit]")
        await expect(page.locator("[role=alert]")).to_contain_text("4030")
        # The thoughts page shows its own project only.
        await page.goto(f"{server.url}/ui/thoughts")
        await expect(page.locator("#thoughts > li")).to_have_count(len(own))
