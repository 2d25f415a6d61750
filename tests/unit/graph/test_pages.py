"""app/graph/pages.py: its pure parts (numbers clamped, entity links, the neighbourhood drawn, what
replaced what, the quality chart's rows and spec), and its pages and forms through the test server with
a signed-in httpx client: the listing, a search by text, an entity page, and the forms that add,
supersede and change status, with their flash messages and refusals."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.graph import pages
from tests.support.server import ADMIN_KEY, RunningServer

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def test_whole_numbers_are_clamped_or_defaulted() -> None:
    assert pages._int(None, 7, 0, 10) == 7 and pages._int("", 7, 0, 10) == 7 and pages._int("x", 7, 0, 10) == 7
    assert pages._int("-5", 7, 0, 10) == 0 and pages._int("50", 7, 0, 10) == 10 and pages._int("3", 7, 0, 10) == 3


def test_entity_links_quote_the_name_and_keep_a_project() -> None:
    assert pages.entity_url("Ada/Lovelace") == "/ui/graph/entities/Ada%2FLovelace"
    assert pages.entity_url("A b", "lab x") == "/ui/graph/entities/A%20b?project=lab+x"
    form = {"q": "engine", "mode": "nodes", "type": "", "archived": False}
    assert pages._more_url(form, "lab") == "/ui/graph?q=engine&mode=nodes&project=lab"
    assert pages._more_url({"q": "", "mode": "", "type": "", "archived": False}, "") == "/ui/graph?"


def _rel(a: str, b: str, kind: str, active: bool = True) -> dict[str, Any]:
    return {"from": a, "to": b, "relationType": kind, "active": active}


def test_the_neighbourhood_draws_active_relations_around_the_focus() -> None:
    graph = pages.neighbourhood("Ada", [_rel("Ada", "Engine", "programmed"), _rel("Bob", "Ada", "met", False)], "p")
    nodes = [e for e in graph["elements"] if "source" not in e["data"]]
    edges = [e for e in graph["elements"] if "source" in e["data"]]
    assert [n["data"]["label"] for n in nodes] == ["Ada", "Engine"]  # the ended relation draws nothing
    assert nodes[0]["classes"] == "focus" and "classes" not in nodes[1]
    assert nodes[1]["data"]["href"] == "/ui/graph/entities/Engine?project=p"
    assert edges == [{"data": {"id": "e0", "source": "n0", "target": "n1", "label": "programmed"}}]
    many = pages.neighbourhood("Hub", [_rel("Hub", f"N{i}", "links") for i in range(100)])
    drawn = [e for e in many["elements"] if "source" not in e["data"]]
    assert len(drawn) == pages.GRAPH_NODES + 1
    assert len([e for e in many["elements"] if "source" in e["data"]]) == pages.GRAPH_NODES


def test_statuses_read_in_english_and_by_status_buckets_are_statuses() -> None:
    assert [pages.status_label(s) for s in ("activo", "archivado", "paused", None)] == [
        "active",
        "archived",
        "paused",
        "",
    ]
    # graph_stats names a bucket's status `entityType` today; a `status` key is read the same way.
    stats = {"by_status": [{"entityType": "activo", "count": 3}, {"status": "archivado", "count": 1}]}
    assert pages.status_buckets(stats) == [
        {"status": "activo", "label": "active", "count": 3},
        {"status": "archivado", "label": "archived", "count": 1},
    ]
    assert pages.status_buckets({}) == []


def test_superseded_by_maps_each_replaced_observation_to_its_successor() -> None:
    rows: list[dict[str, Any]] = [{"id": 1, "supersedes": None}, {"id": 2, "supersedes": 1}, {"id": 3}]
    assert pages.superseded_by(rows) == {1: {"id": 2, "supersedes": 1}}


def test_quality_rows_leave_out_metrics_without_feedback_and_the_spec_fixes_its_axes() -> None:
    report = {
        "k": 5,
        "treatments": [
            {
                "treatment": "limbic",
                "ndcg_at_k": 0.5,
                "ndcg_at_k_baseline_order": 0.4,
                "mrr": None,
                "mrr_baseline_order": None,
            },
            {
                "treatment": "baseline",
                "ndcg_at_k": None,
                "ndcg_at_k_baseline_order": None,
                "mrr": 1.0,
                "mrr_baseline_order": 0.9,
            },
        ],
    }
    rows = pages.quality_rows(report)
    assert rows == [
        {"treatment": "limbic", "series": "NDCG@5", "value": 0.5},
        {"treatment": "limbic", "series": "NDCG@5, baseline order", "value": 0.4},
        {"treatment": "baseline", "series": "MRR", "value": 1.0},
        {"treatment": "baseline", "series": "MRR, baseline order", "value": 0.9},
    ]
    spec = pages.quality_spec(rows, 5)
    assert spec["data"]["values"] == rows and spec["encoding"]["x"]["scale"]["domain"] == ["limbic", "baseline"]
    assert spec["encoding"]["y"]["scale"]["domain"] == [0, 1]
    assert spec["encoding"]["color"]["scale"]["domain"][0] == "NDCG@5"


@pytest.fixture
async def console(server: RunningServer) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A browser-like httpx client signed in with the admin key, and its CSRF token."""
    async with httpx.AsyncClient(base_url=server.url, timeout=60, headers={"Origin": server.url}) as client:
        login = await client.get("/ui/login")
        token = _CSRF.search(login.text)
        assert token is not None
        done = await client.post("/ui/login", data={"csrf": token.group(1), "key": ADMIN_KEY, "next": "/ui/graph"})
        assert done.status_code == 303, done.text
        page = await client.get("/ui/graph")
        found = _CSRF.search(page.text)
        assert page.status_code == 200 and found is not None
        yield client, found.group(1)


async def _seed(rest: httpx.AsyncClient) -> None:
    entities = [
        {"name": "Stone Circle", "entityType": "site", "observations": ["ring of standing stones"]},
        {"name": "Barrow", "entityType": "site", "observations": ["a burial mound"]},
        {"name": "Druid", "entityType": "person", "observations": ["keeps the calendar"]},
    ]
    r = await rest.post("/api/v1/graph/entities", json={"entities": entities, "project": "henge"})
    assert r.status_code == 200, r.text
    r = await rest.post(
        "/api/v1/graph/relations",
        json={"relations": [{"from": "Druid", "to": "Stone Circle", "relationType": "tends"}], "project": "henge"},
    )
    assert r.status_code == 200, r.text


async def test_the_listing_a_text_search_and_an_entity_page(
    console: tuple[httpx.AsyncClient, str], rest: httpx.AsyncClient
) -> None:
    client, _ = console
    await _seed(rest)
    listing = await client.get("/ui/graph", params={"project": "henge", "type": "site"})
    assert listing.status_code == 200 and "Stone Circle" in listing.text and "Barrow" in listing.text
    assert "Druid" not in listing.text  # the type filter reached read_graph
    found = await client.get("/ui/graph", params={"project": "henge", "q": "burial", "mode": "nodes"})
    assert found.status_code == 200 and "Barrow" in found.text and "Stone Circle" not in found.text
    entity = await client.get(pages.entity_url("Stone Circle", "henge"))
    assert entity.status_code == 200 and "ring of standing stones" in entity.text
    assert "Druid" in entity.text and "tends" in entity.text  # the incoming relation and its neighbour
    missing = await client.get(pages.entity_url("Nobody", "henge"))
    assert missing.status_code == 404 and "Nobody" in missing.text


async def test_the_entity_forms_add_supersede_and_change_status(
    console: tuple[httpx.AsyncClient, str], rest: httpx.AsyncClient
) -> None:
    client, csrf = console
    await _seed(rest)
    form = {"csrf": csrf, "entity": "Barrow", "project": "henge"}
    added = await client.post("/ui/graph/observations/add", data={**form, "content": "dug in 1850", "kind": "dig"})
    assert added.status_code == 303 and added.headers["location"] == pages.entity_url("Barrow", "henge")
    page = await client.get(added.headers["location"])
    assert "Observation added" in page.text and "dug in 1850" in page.text
    again = await client.post("/ui/graph/observations/add", data={**form, "content": "dug in 1850"})
    assert "nothing was added" in (await client.get(again.headers["location"])).text
    params = {"entity_name": "Barrow", "project": "henge"}
    history = (await rest.get("/api/v1/graph/entities/history", params=params)).json()
    dug = next(o for o in history["observations"] if o["content"] == "dug in 1850")
    assert dug["kind"] == "dig"
    refused = await client.post("/ui/graph/observations/supersede", data={**form, "observation_id": "first"})
    assert refused.status_code == 400 and "names no observation" in refused.text
    replaced = await client.post(
        "/ui/graph/observations/supersede",
        data={**form, "observation_id": str(dug["id"]), "new_content": "dug in 1851"},
    )
    assert replaced.status_code == 303
    assert f"Observation #{dug['id']} superseded by #" in (await client.get(replaced.headers["location"])).text
    status = await client.post("/ui/graph/status", data={**form, "status": "archivado"})
    shown = (await client.get(status.headers["location"])).text
    # The seed's Spanish value is taken on input and stored, and shown, in English.
    assert "Status set to archived (was active)" in shown
    assert '<span class="tag">archived</span>' in shown
    listing = await client.get("/ui/graph", params={"project": "henge"})
    statuses = re.search(r'<dd id="graph-statuses">(.*?)</dd>', listing.text)
    assert statuses is not None and "archived · 1" in statuses.group(1), listing.text[:3000]
    assert "entityType" not in statuses.group(1) and "archivado ·" not in statuses.group(1)
    nameless = await client.post("/ui/graph/status", data={"csrf": csrf, "entity": " ", "status": "activo"})
    assert nameless.status_code == 400 and "names no entity" in nameless.text
