"""app/memory/pages.py: its pure parts (comma lists, cited lines, a hit's signals, the thoughts page's
links, the summarize form's defaults, errors shown in place), and its pages and forms through the test
server with a signed-in httpx client: a search whose hits carry their cited text, a memory's page and a
bad offset, retag and delete with their flash, the thoughts list with facet links, and a thought edited
(other metadata kept), archived, restored and deleted."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from app.core.errors import NotFound, Unauthenticated
from app.memory import pages
from tests.support.server import ADMIN_KEY, RunningServer

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def test_comma_lists_are_trimmed_deduplicated_and_ordered() -> None:
    assert pages._words(" b, a ,, b,c ") == ["b", "a", "c"] and pages._words("") == []


def test_cited_lines_are_read_by_their_number_with_or_without_a_date() -> None:
    context = "[1] first text\n[2] (2026-11-24) second text\nnot cited\n[x] neither"
    assert pages.cited(context) == {1: "first text", 2: "second text"}
    assert pages.cited(None) == {}


def test_a_hits_signals_come_semantic_first_with_their_names() -> None:
    rows = pages._signals({"lexical": {"score": 0.4, "rank": 2}, "semantic": {"score": 0.9, "rank": 1}, "x": {}})
    assert [(r["key"], r["name"], r["score"], r["rank"]) for r in rows] == [
        ("semantic", "cosine", 0.9, 1),
        ("lexical", "lexical coverage", 0.4, 2),
        ("x", "x", None, None),
    ]
    assert pages._signals(None) == []


def test_the_thoughts_links_change_one_filter_and_drop_blank_ones() -> None:
    filters = {"project": "lab", "topic": "bees"}
    assert pages._thoughts_url(filters, topic=None) == "/ui/thoughts?project=lab"
    assert pages._thoughts_url(filters, person="eva") == "/ui/thoughts?project=lab&topic=bees&person=eva"
    assert pages._thoughts_url({}) == "/ui/thoughts"


def test_the_summarize_form_defaults_to_the_last_week() -> None:
    form = pages._summarize_form({"project": "lab", "strategy": "extractive"})
    assert form["project"] == "lab" and form["strategy"] == "extractive" and form["memory_type"] == "episodic"
    start = datetime.strptime(form["start"], "%Y-%m-%dT%H:%M").replace(tzinfo=UTC)
    assert abs(datetime.now(UTC) - timedelta(days=7) - start) < timedelta(minutes=2) and form["limit"] == "50"
    assert pages._stamp(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04"


async def test_errors_are_shown_in_place_but_a_refused_key_is_not() -> None:
    error = pages._refusal(NotFound("No memory with id x"))
    assert error["code"] == 4002 and error["message"] == "No memory with id x"
    with pytest.raises(Unauthenticated):
        pages._refusal(Unauthenticated("key revoked"))

    async def fails() -> dict[str, Any]:
        raise NotFound("gone")

    async def answers() -> dict[str, Any]:
        return {"ok": 1}

    assert isinstance(await pages._attempt(fails()), NotFound) and await pages._attempt(answers()) == {"ok": 1}


@pytest.fixture
async def console(server: RunningServer) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A browser-like httpx client signed in with the admin key, and its CSRF token."""
    async with httpx.AsyncClient(base_url=server.url, timeout=60, headers={"Origin": server.url}) as client:
        login = await client.get("/ui/login")
        token = _CSRF.search(login.text)
        assert token is not None
        done = await client.post("/ui/login", data={"csrf": token.group(1), "key": ADMIN_KEY, "next": "/ui/thoughts"})
        assert done.status_code == 303, done.text
        page = await client.get("/ui/thoughts")
        found = _CSRF.search(page.text)
        assert page.status_code == 200 and found is not None
        yield client, found.group(1)


async def _thought(rest: httpx.AsyncClient, content: str, **metadata: Any) -> str:
    r = await rest.post("/api/v1/thoughts", json={"content": content, "project": "hive", "metadata": metadata})
    assert r.status_code == 200, r.text
    thought_id: str = r.json()["thought"]["id"]
    return thought_id


async def test_a_search_a_memory_page_retag_and_delete(
    console: tuple[httpx.AsyncClient, str], rest: httpx.AsyncClient
) -> None:
    client, csrf = console
    mid = await _thought(rest, "The queen bee lays two thousand eggs a day", type="fact")
    await _thought(rest, "Varroa mites weaken the colony in autumn")
    found = await client.get("/ui/memory", params={"q": "queen bee eggs", "mode": "lexical", "project": "hive"})
    assert found.status_code == 200 and "two thousand eggs" in found.text and "Varroa" not in found.text
    refused = await client.get("/ui/memory", params={"q": "bees", "collection": "no-such-collection"})
    assert refused.status_code == 200  # the refusal is shown in place, on the search page
    assert "No collection named &#39;no-such-collection&#39;" in refused.text
    item = await client.get(f"/ui/memory/items/{mid}")
    assert item.status_code == 200 and "two thousand eggs" in item.text
    bad = await client.get(f"/ui/memory/items/{mid}", params={"offset": "many"})
    assert bad.status_code == 400 and "offset must be a whole number" in bad.text
    tagged = await client.post(f"/ui/memory/items/{mid}/tags", data={"csrf": csrf, "tags": "b, a, b"})
    assert tagged.status_code == 303 and tagged.headers["location"] == f"/ui/memory/items/{mid}"
    assert "Tags saved on 1 memory(ies): a, b" in (await client.get(tagged.headers["location"])).text
    gone = await client.post(f"/ui/memory/items/{mid}/delete", data={"csrf": csrf})
    assert gone.status_code == 303 and gone.headers["location"] == "/ui/memory"
    assert "Deleted 1 memory(ies)" in (await client.get("/ui/memory")).text
    assert (await rest.get(f"/api/v1/thoughts/{mid}")).status_code == 404


async def test_the_thoughts_list_links_its_facets_and_a_thought_is_edited_archived_and_deleted(
    console: tuple[httpx.AsyncClient, str], rest: httpx.AsyncClient
) -> None:
    client, csrf = console
    tid = await _thought(rest, "Bees dance to show the way to flowers", type="fact", topics=["bees"], source="book")
    await _thought(rest, "Buy a new smoker", type="task", people=["eva"])
    listed = await client.get("/ui/thoughts", params={"project": "hive"})
    assert listed.status_code == 200 and "Bees dance" in listed.text and "Buy a new smoker" in listed.text
    assert "/ui/thoughts?project=hive&amp;topic=bees" in listed.text  # a facet link adds its filter
    only = await client.get("/ui/thoughts", params={"project": "hive", "topic": "bees"})
    assert "Bees dance" in only.text and "Buy a new smoker" not in only.text
    assert "/ui/thoughts?project=hive" in only.text  # the current facet's link drops it again
    page = await client.get(f"/ui/thoughts/{tid}")
    assert page.status_code == 200 and "Bees dance" in page.text
    edited = await client.post(
        f"/ui/thoughts/{tid}/edit",
        data={
            "csrf": csrf,
            "content": "Bees dance to show the way to nectar",
            "type": "",
            "topics": "bees, dance",
            "people": "",
        },
    )
    assert edited.status_code == 303 and "Thought saved" in (await client.get(edited.headers["location"])).text
    thought = (await rest.get(f"/api/v1/thoughts/{tid}")).json()["thought"]
    assert thought["content"] == "Bees dance to show the way to nectar"
    assert thought["metadata"]["topics"] == ["bees", "dance"] and thought["metadata"]["source"] == "book"
    assert "type" not in thought["metadata"]  # a blank type removes it
    archived = await client.post(f"/ui/thoughts/{tid}/archive", data={"csrf": csrf})
    assert "Thought archived" in (await client.get(archived.headers["location"])).text
    assert (await rest.get(f"/api/v1/thoughts/{tid}")).json()["thought"]["archived"] is True
    restored = await client.post(f"/ui/thoughts/{tid}/archive", data={"csrf": csrf, "archived": "0"})
    assert "Thought restored" in (await client.get(restored.headers["location"])).text
    deleted = await client.post(f"/ui/thoughts/{tid}/delete", data={"csrf": csrf})
    assert deleted.status_code == 303 and deleted.headers["location"] == "/ui/thoughts"
    assert (await client.get(f"/ui/thoughts/{tid}")).status_code == 404


async def test_the_summarize_form_shows_the_summary_or_the_refusal(
    console: tuple[httpx.AsyncClient, str], rest: httpx.AsyncClient
) -> None:
    client, csrf = console
    await _thought(rest, "The hive gained weight all through June")
    await _thought(rest, "Swarming season ended early this year")
    blank = await client.get("/ui/memory/summarize", params={"project": "hive"})
    assert blank.status_code == 200 and 'value="hive"' in blank.text
    done = await client.post("/ui/memory/summarize", data={"csrf": csrf, "project": "hive", "strategy": "extractive"})
    assert done.status_code == 200 and "gained weight" in done.text
    empty = await client.post(
        "/ui/memory/summarize", data={"csrf": csrf, "project": "no-hive", "strategy": "extractive"}
    )
    assert empty.status_code == 200 and "gained weight" not in empty.text and "Error 4002" in empty.text


def test_kinds_read_as_what_stored_them() -> None:
    assert pages.kind_label("chunk") == "pushed" and pages.kind_label("chunk", 0) == "pushed"
    assert pages.kind_label("chunk", 2) == "pushed, part 3"
    assert pages.kind_label("thought") == "thought" and pages.kind_label("summary", 4) == "summary"
    assert pages._headline({"content": "  many   words\nhere "}) == "many words here"
    assert pages._headline({"content": "x", "source_uri": "docs/a.md"}) == "docs/a.md"
    assert pages._headline({"content": "y" * 100}, 10) == "y" * 9 + "…"


def _listed(html: str) -> list[str]:
    """The texts of the memories a browse page lists, in order."""
    return [re.sub(r"\s+", " ", t).strip() for t in re.findall(r'<div class="text">([^<…]*)', html)]


async def test_with_no_query_the_memories_are_listed_newest_first_and_filtered(
    console: tuple[httpx.AsyncClient, str], rest: httpx.AsyncClient
) -> None:
    client, _ = console
    notes = [
        ("Swarm season starts in May.", "episodic", ["swarm"], "notes/may.md"),
        ("Hives need ventilation in winter.", "semantic", ["winter"], "notes/winter.md"),
        ("Inspect the brood every nine days.", "procedural", ["swarm", "brood"], "guides/brood.md"),
    ]
    for text, kind, tags, source in notes:
        body = {"text": text, "project": "apiary", "type": kind, "tags": tags, "source_uri": source}
        assert (await rest.post("/api/v1/memory/push", json=body)).status_code == 200
    await rest.post("/api/v1/thoughts", json={"content": "Order more frames.", "project": "apiary"})
    await rest.post("/api/v1/memory/push", json={"text": "Another project's note.", "project": "orchard"})
    page = await client.get("/ui/memory", params={"project": "apiary"})
    assert page.status_code == 200 and "4 memories in project <strong>apiary</strong>" in page.text
    assert _listed(page.text) == ["Order more frames.", *(t for t, *_ in reversed(notes))]
    assert "Another project" not in page.text and "pushed · procedural" in page.text
    for params, expected in (
        ({"memory_type": "procedural"}, [notes[2][0]]),
        ({"tags": "swarm"}, [notes[2][0], notes[0][0]]),
        ({"source": "notes/"}, [notes[1][0], notes[0][0]]),
        ({"kind": "thought"}, ["Order more frames."]),
    ):
        filtered = await client.get("/ui/memory", params=params)  # the project is remembered
        assert _listed(filtered.text) == expected, (params, filtered.text[-3000:])
    second = await client.get("/ui/memory", params={"offset": "3"})
    assert _listed(second.text) == [notes[0][0]] and "Newer memories" in second.text
    assert "Older memories" not in second.text
    # A pushed note among the thoughts reads as a pushed memory (a link to its memory page), not "chunk".
    thoughts = await client.get("/ui/thoughts")
    assert "pushed memory</a>" in thoughts.text and "· chunk" not in thoughts.text
