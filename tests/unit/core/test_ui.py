"""The console's pure parts: where a sign-in may send the browser, the CSRF token, data for scripts."""

from __future__ import annotations

import hashlib
import hmac
import json
import re

import httpx
import pytest

from app.core.errors import InvalidInput
from app.core.ui import (
    PROJECT_COOKIE,
    SIGN_IN_REASONS,
    SignInRequired,
    _fmt_time,
    _json_script,
    csrf_token,
    form_text,
    project_name,
    safe_next,
    sign_in_reason,
    whole_number,
    with_project,
)
from tests.support.console import signed_in
from tests.support.memory import api
from tests.support.server import ADMIN_KEY, PROJECT_KEY, RunningServer


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (None, "/ui/"),
        ("", "/ui/"),
        ("/ui/memory?q=a", "/ui/memory?q=a"),
        ("/ui/graph/entities/a%2Fb", "/ui/graph/entities/a%2Fb"),
        ("https://evil.example/ui/", "/ui/"),
        ("//evil.example/ui/", "/ui/"),
        ("/api/v1/keys", "/ui/"),
        ("/ui\\@evil.example", "/ui/"),
        ("javascript:alert(1)", "/ui/"),
    ],
)
def test_only_console_paths_are_followed_after_sign_in(target: str | None, expected: str) -> None:
    assert safe_next(target) == expected


def test_the_csrf_token_belongs_to_its_seed_its_key_and_the_server_secret() -> None:
    seed, secret = "s" * 43, b"k" * 43
    token = csrf_token(secret, seed, "cairn_key1")
    assert token == csrf_token(secret, seed, "cairn_key1") and len(token) == 40 and seed not in token
    assert token != csrf_token(secret, seed[:-1] + "t", "cairn_key1")  # another seed
    assert token != csrf_token(secret, seed, "cairn_key2")  # another session's key
    assert token != csrf_token(b"j" * 43, seed, "cairn_key1")  # another server
    # The old token, an HMAC of the seed alone that any page able to set the seed could compute:
    assert (
        csrf_token(secret, seed, "") != hmac.new(seed.encode(), b"cairn-console-form", hashlib.sha256).hexdigest()[:40]
    )


def test_the_sign_in_page_names_only_known_reasons() -> None:
    assert sign_in_reason(SignInRequired(SIGN_IN_REASONS["refused"])) == "refused"
    assert sign_in_reason(SignInRequired("Your account is suspended: call +1 555 0100")) == "needed"


async def test_the_sign_in_page_shows_no_text_from_its_link(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        page = await client.get("/ui/login", params={"why": "Your key expired: call +1 555 0100 now"})
        assert page.status_code == 200 and "555 0100" not in page.text and "expired" not in page.text
        page = await client.get("/ui/login", params={"why": "refused"})
        assert SIGN_IN_REASONS["refused"] in page.text


def test_script_data_cannot_close_its_element() -> None:
    value = {"label": "</script><script>alert(1)</script>", "amp": "a & b"}
    text = str(_json_script(value))
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == value


def test_times_read_as_iso_text_or_datetimes() -> None:
    assert _fmt_time("2026-11-25T02:14:26.123+00:00") == "2026-11-25 02:14:26"
    assert _fmt_time("not a time") == "not a time"
    assert _fmt_time(None) == ""


def test_form_fields_are_single_stripped_and_bounded() -> None:
    fields = {"name": "  a name ", "twice": ["a", "b"], "long": "x" * 11}
    assert form_text(fields, "name") == "a name" and form_text(fields, "absent") == ""
    for name, limit in (("twice", None), ("long", 10)):
        with pytest.raises(InvalidInput):
            form_text(fields, name, limit)
    assert form_text(fields, "long", 11) == "x" * 11


def test_whole_numbers_and_projects() -> None:
    assert whole_number("42", "n") == 42 and whole_number(" ", "n") is None and whole_number(None, "n") is None
    with pytest.raises(InvalidInput):
        whole_number("4.2", "n")
    assert with_project({"a": 1}, "") == {"a": 1}
    assert with_project({"a": 1}, "alpha") == {"a": 1, "project": "alpha"}


def test_only_project_names_are_remembered() -> None:
    assert project_name("team-notes") == "team-notes" and project_name("a.b_c") == "a.b_c"
    for bad in ("", None, "-lead", "a b", "x" * 129, "a/b"):
        assert project_name(bad) == ""


def _heading(html: str) -> str:
    found = re.search(r"<h1>(.*?)</h1>", html, re.S)
    assert found is not None
    return re.sub(r"<[^>]+>", "", found.group(1)).strip()


@pytest.mark.slow
async def test_the_chosen_project_is_remembered_across_sections(server: RunningServer) -> None:
    async with signed_in(server.url, ADMIN_KEY) as console:
        # A page opened on a project makes it the chosen one; the other sections follow it.
        opened = await console.client.get("/ui/", params={"project": "alpha"})
        assert console.client.cookies.get(PROJECT_COOKIE) == "alpha"
        assert _heading(opened.text) == "Project alpha"
        assert _heading(await console.page("/ui/graph")) == "Graph · alpha"
        assert _heading(await console.page("/ui/datasets")) == "Datasets · alpha"
        assert "Query · alpha" in await console.page("/ui/datasets/query")
        assert "in project <strong>alpha</strong>" in await console.page("/ui/analysis")
        # The picker: its choice, back to the page it was sent from (without a stale project or offset).
        picked = await console.post("/ui/project", {"project": "beta", "next": "/ui/memory?q=x&project=alpha&offset=5"})
        assert picked.status_code == 303 and picked.headers["location"] == "/ui/memory?q=x"
        assert console.client.cookies.get(PROJECT_COOKIE) == "beta"
        assert _heading(await console.page("/ui/graph")) == "Graph · beta"
        assert (await console.post("/ui/project", {"project": "no/such"})).status_code == 400
        outside = await console.post("/ui/project", {"project": "beta", "next": "https://evil.example/"})
        assert outside.headers["location"] == "/ui/"
        cleared = await console.post("/ui/project", {"project": ""})
        assert cleared.status_code == 303 and PROJECT_COOKIE not in console.client.cookies
        assert _heading(await console.page("/ui/graph")) == "Graph · default"
        # Without its token the picker changes nothing.
        forged = await console.client.post("/ui/project", data={"project": "gamma"})
        assert forged.status_code == 403 and PROJECT_COOKIE not in console.client.cookies
    async with signed_in(server.url, PROJECT_KEY) as bound:
        bound.client.cookies.set(PROJECT_COOKIE, "alpha", path="/ui")
        page = await bound.page("/ui/")
        assert _heading(page) == "Project bound-proj" and 'id="project-choice"' not in page
        # Every tally of its own project answers (the server-wide queue is not shown to it).
        assert 'role="alert"' not in page and 'data-tally="Memories"' in page
        assert 'data-tally="Embedding queue (server)"' not in page


@pytest.mark.slow
async def test_the_home_page_counts_a_projects_items(server: RunningServer, rest: httpx.AsyncClient) -> None:
    await api(rest, "/memory/push", {"text": "The kiln reaches 1200 degrees.", "project": "pottery", "tags": ["kiln"]})
    await api(rest, "/memory/push", {"text": "Glaze recipes live in the blue binder.", "project": "pottery"})
    await api(rest, "/thoughts", {"content": "Try a slower cooling curve.", "project": "pottery"})
    await api(rest, "/memory/push", {"text": "Elsewhere entirely.", "project": "other"})
    await api(rest, "/graph/entities", {"entities": [{"name": "Kiln", "entityType": "tool"}], "project": "pottery"})
    async with signed_in(server.url, ADMIN_KEY) as console:
        home = await console.page("/ui/", project="pottery")
    tallies = dict(re.findall(r'<li data-tally="([^"]+)">.*?<span class="count">([^<]*)</span>', home, re.S))
    assert tallies["Memories"] == "2" and tallies["Thoughts"] == "1" and tallies["Entities"] == "1", tallies
    assert tallies["Analysis sessions"] == "0" and tallies["Datasets"] == "0", tallies
    assert tallies["Embedding queue (server)"] == "0" and tallies["Waiting for a vector"] == "0", tallies
    # The newest first, each a link to its page; the projects listed as links that pick them.
    memories = re.search(r'data-tally="Memories">(.*?)</li>\s*<li data-tally', home, re.S)
    assert memories is not None
    links = re.findall(r'<a href="(/ui/memory/items/[^"]+)">([^<]+)</a>', memories.group(1))
    assert [text for _, text in links] == ["Glaze recipes live in the blue binder.", "The kiln reaches 1200 degrees."]
    assert 'href="/ui/?project=other"' in home and 'href="/ui/thoughts?project=pottery"' in home
