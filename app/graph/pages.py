"""The console's graph pages at `/ui/graph`: search (by meaning with the limbic score components, or by
text), an entity page with its history, relations, reflections and neighbourhood graph, the forms
that change an entity, and the search-quality report as a chart.

Every read and write is an operation call through the executor (`Viewer.call`); this module imports
only the core and the family's schemas. The graph shown is the chosen project's (the console's
picker, or a `project` query parameter; a hidden field on forms); without one the key's project (or
`default`). Statuses read in English (a value stored by an older build as the seed's `activo` /
`archivado` reads "active" / "archived").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import Request
from fastapi.responses import Response

from app.core.charts import vega_lite_png
from app.core.errors import InvalidInput
from app.core.ui import (
    CONSOLE_PATH,
    ConsoleSection,
    Tally,
    Viewer,
    chosen_project,
    console_router,
    form_text,
    viewer,
)
from app.graph.schemas import MAX_NAME_CHARS, MAX_OBSERVATION_CHARS

SECTION_PATH = CONSOLE_PATH + "/graph"
router = console_router("/graph")

MODES = ("semantic", "nodes")
TREATMENTS = ("auto", "limbic", "baseline")
STATUSES = ("active", "archived")
# The seed's status values as a page shows them (any other status is shown as stored).
STATUS_LABELS = {"activo": "active", "archivado": "archived"}
PAGE = 25
HISTORY_LIMIT = 200  # observations and relations shown on an entity page, each
GRAPH_NODES = 60  # neighbours drawn in the neighbourhood graph at most (the list shows them all)
# The score components of a search_semantic hit, in the order the page shows them.
SIGNALS = (
    ("limbic_score", "limbic"),
    ("relevance", "relevance"),
    ("cosine_sim", "cosine"),
    ("text_score", "text"),
    ("importance", "importance"),
    ("temporal", "temporal"),
    ("cooc_boost", "co-occurrence"),
)


# ------------------------------------------------------------------------------------------ helpers


def _text(fields: dict[str, Any], name: str, limit: int = MAX_OBSERVATION_CHARS) -> str:
    """One text field of a posted form, stripped, at most an observation's length by default."""
    return form_text(fields, name, limit)


def _int(value: str | None, default: int, low: int, high: int) -> int:
    """A whole-number query parameter, clamped to [low, high] (the default when absent or not a number)."""
    try:
        number = int(value) if value not in (None, "") else default
    except ValueError:
        return default
    return max(low, min(high, number))


def _project_args(project: str) -> dict[str, str]:
    return {"project": project} if project else {}


def status_label(status: str | None) -> str:
    """An entity status in English (a stored `activo` reads "active", `archivado` "archived")."""
    return STATUS_LABELS.get(status or "", status or "")


def status_buckets(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """graph_stats' `by_status` as (status, label, count) rows, whichever key its rows name the status by."""
    rows = []
    for bucket in stats.get("by_status") or []:
        value = bucket.get("status", bucket.get("entityType", ""))
        rows.append({"status": value, "label": status_label(value), "count": bucket.get("count", 0)})
    return rows


async def overview(view: Viewer, project: str) -> list[Tally]:
    """The home page's graph tally of `project`: its entities (graph_stats)."""
    stats = await view.call("graph_stats", {"project": project})
    return [
        Tally(
            title="Entities",
            count=stats["entities"],
            href=f"{SECTION_PATH}?{urlencode({'project': project})}",
            note=f"{stats['relations']} relations, {stats['observations']} observations",
        )
    ]


SECTIONS = (
    ConsoleSection(
        title="Graph",
        path=SECTION_PATH,
        router=router,
        templates=Path(__file__).parent / "templates",
        overview=overview,
    ),
)


def entity_url(name: str, project: str = "") -> str:
    """The console page of entity `name` (in `project`, when one was picked)."""
    url = f"{SECTION_PATH}/entities/{quote(name, safe='')}"
    return url + (f"?{urlencode({'project': project})}" if project else "")


def neighbourhood(focus: str, relations: list[dict[str, Any]], project: str = "") -> dict[str, Any]:
    """The Cytoscape elements of an entity's active relations: the focus node (class `focus`), one node
    per neighbour (at most GRAPH_NODES) and one edge per relation between drawn nodes; every node links
    to its entity page."""
    ids: dict[str, str] = {}
    nodes: list[dict[str, Any]] = []

    def node(name: str) -> str | None:
        if name not in ids:
            if len(ids) > GRAPH_NODES:
                return None
            ids[name] = f"n{len(ids)}"
            element: dict[str, Any] = {"data": {"id": ids[name], "label": name, "href": entity_url(name, project)}}
            if name == focus:
                element["classes"] = "focus"
            nodes.append(element)
        return ids[name]

    node(focus)
    edges: list[dict[str, Any]] = []
    for rel in relations:
        if not rel["active"]:
            continue
        source, target = node(rel["from"]), node(rel["to"])
        if source is None or target is None:
            continue
        edges.append(
            {"data": {"id": f"e{len(edges)}", "source": source, "target": target, "label": rel["relationType"]}}
        )
    return {"elements": nodes + edges}


def superseded_by(observations: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """For each replaced observation id, the observation that replaced it."""
    return {o["supersedes"]: o for o in observations if o.get("supersedes") is not None}


# ------------------------------------------------------------------------------------------ the chart


def quality_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's metrics as chart rows (treatment, series, value): NDCG@k and MRR, each in the served
    order and in the baseline order; metrics without feedback are left out."""
    rows = []
    for t in report["treatments"]:
        for key, series in _series(report["k"]):
            if t[key] is not None:
                rows.append({"treatment": t["treatment"], "series": series, "value": t[key]})
    return rows


def _series(k: int) -> tuple[tuple[str, str], ...]:
    return (
        ("ndcg_at_k", f"NDCG@{k}"),
        ("ndcg_at_k_baseline_order", f"NDCG@{k}, baseline order"),
        ("mrr", "MRR"),
        ("mrr_baseline_order", "MRR, baseline order"),
    )


def quality_spec(rows: list[dict[str, Any]], k: int) -> dict[str, Any]:
    """A Vega-Lite v5 spec: per treatment (both always on the axis), grouped bars of NDCG@k and MRR as
    served and in baseline order, on a 0-1 scale."""
    series = [label for _, label in _series(k)]
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
        "data": {"values": rows},
        "mark": {"type": "bar"},
        "width": 420,
        "height": 240,
        "encoding": {
            "x": {
                "field": "treatment",
                "type": "nominal",
                "title": "ranking (A/B treatment)",
                "scale": {"domain": ["limbic", "baseline"]},
                "axis": {"labelAngle": 0},
            },
            "xOffset": {"field": "series", "type": "nominal", "scale": {"domain": series}},
            "y": {"field": "value", "type": "quantitative", "title": "score", "scale": {"domain": [0, 1]}},
            "color": {
                "field": "series",
                "type": "nominal",
                "title": None,
                "scale": {"domain": series, "range": ["#1f5fa8", "#8fb3dd", "#d07a00", "#f0c27a"]},
                "legend": {"orient": "bottom", "columns": 2},
            },
        },
        "config": {"background": "white", "font": "sans-serif"},
    }


# ------------------------------------------------------------------------------------------ pages


@router.get("")
async def search_page(request: Request) -> Response:
    """Graph statistics, a search by meaning (each hit with its limbic score components) or by text,
    and, with no query, the entities page by page."""
    view = await viewer(request)
    query = request.query_params
    project = chosen_project(request)
    scoped = _project_args(project)
    q = query.get("q", "").strip()[:2048]
    mode = query.get("mode") if query.get("mode") in MODES else "semantic"
    treatment = query.get("treatment") if query.get("treatment") in TREATMENTS else "auto"
    entity_type = query.get("type", "").strip()[:128]
    archived = query.get("archived") == "1"
    offset = _int(query.get("offset"), 0, 0, 1_000_000)
    semantic = nodes = listing = None
    if q and mode == "semantic":
        args: dict[str, Any] = {**scoped, "query": q, "limit": 20, "treatment": treatment, "include_archived": archived}
        args["explain"] = True  # the page shows each hit's score components
        if entity_type:
            args["entity_type"] = entity_type
        semantic = await view.call("search_semantic", args)
    elif q:
        nodes = await view.call(
            "search_nodes", {**scoped, "query": q, "limit": PAGE, "offset": offset, "max_observations": 3}
        )
    else:
        args = {**scoped, "limit": PAGE, "offset": offset, "max_observations": 0}
        if entity_type:
            args["entity_type"] = entity_type
        listing = await view.call("read_graph", args)
    stats = await view.call("graph_stats", scoped)  # after the search, which it counts
    form = {"q": q, "mode": mode, "treatment": treatment, "type": entity_type, "archived": archived}
    return view.render(
        "graph/search.html",
        stats=stats,
        semantic=semantic,
        nodes=nodes,
        listing=listing,
        form=form,
        project=project,
        signals=SIGNALS,
        treatments=TREATMENTS,
        entity_url=entity_url,
        more_url=_more_url(form, project),
        status_label=status_label,
        statuses_of=status_buckets(stats),
    )


def _more_url(form: dict[str, Any], project: str) -> str:
    """The search page's URL with the current filters, to which `&offset=N` is added."""
    params = {"q": form["q"], "mode": form["mode"], "type": form["type"], **_project_args(project)}
    return f"{SECTION_PATH}?{urlencode({k: v for k, v in params.items() if v})}"


@router.get("/quality")
async def quality_page(request: Request) -> Response:
    """search_quality_report: NDCG@k and MRR per A/B treatment as a chart and a table."""
    view = await viewer(request)
    query = request.query_params
    project = chosen_project(request)
    days = _int(query.get("days"), 30, 1, 3650)
    k = _int(query.get("k"), 10, 1, 50)
    report = await view.call("search_quality_report", {**_project_args(project), "days": days, "k": k})
    rows = quality_rows(report)
    png = await vega_lite_png(quality_spec(rows, k)) if rows else None
    alt = "; ".join(f"{r['treatment']} {r['series']}: {r['value']:.3f}" for r in rows)
    return view.render("graph/quality.html", report=report, png=png, alt=alt, project=project)


@router.get("/entities/{name:path}")
async def entity_page(request: Request, name: str) -> Response:
    """One entity: type and status, observations with their superseded history, relations in and out,
    reflections about it, and its neighbourhood drawn as a graph (and listed, for pages without scripts)."""
    view = await viewer(request)
    project = chosen_project(request)
    history = await view.call(
        "get_entity_history", {**_project_args(project), "entity_name": name, "limit": HISTORY_LIMIT}
    )
    focus = history["entity"]["name"]
    observations = history["observations"]
    relations = history["relations"]
    active = [r for r in relations if r["active"]]
    neighbours = sorted({r["to"] if r["from"] == focus else r["from"] for r in active} - {focus})
    return view.render(
        "graph/entity.html",
        entity=history["entity"],
        current=[o for o in observations if o["superseded_at"] is None],
        old=[o for o in observations if o["superseded_at"] is not None],
        replaced_by=superseded_by(observations),
        outgoing=[r for r in relations if r["from"] == focus],
        incoming=[r for r in relations if r["to"] == focus and r["from"] != focus],
        neighbours=neighbours,
        graph=neighbourhood(focus, relations, project),
        reflections=history["reflections"],
        truncated=history["truncated"],
        limit=HISTORY_LIMIT,
        project=project,
        statuses=STATUSES,
        status_label=status_label,
        entity_url=entity_url,
    )


# ------------------------------------------------------------------------------------------ forms


async def _entity_form(view: Viewer) -> tuple[dict[str, Any], str, dict[str, str]]:
    """The posted form (CSRF checked), its entity name and its project arguments."""
    fields = await view.form()
    name = _text(fields, "entity", MAX_NAME_CHARS)
    if not name:
        raise InvalidInput("The form names no entity")
    return fields, name, _project_args(_text(fields, "project", 128))


@router.post("/observations/add")
async def add_observation(request: Request) -> Response:
    """add_observations with one text, then back to the entity page."""
    view = await viewer(request)
    fields, name, scoped = await _entity_form(view)
    entry: dict[str, Any] = {"entityName": name, "contents": [_text(fields, "content")]}
    kind = _text(fields, "kind", 128)
    if kind:
        entry["kind"] = kind
    result = await view.call("add_observations", {**scoped, "observations": [entry]})
    added = sum(len(r["addedObservations"]) for r in result["results"])
    flash = "Observation added" if added else "The entity already holds that observation; nothing was added"
    return view.redirect(entity_url(name, scoped.get("project", "")), flash=flash)


@router.post("/observations/supersede")
async def supersede_observation(request: Request) -> Response:
    """supersede_observation: a new text replaces a current observation, which stays in the history."""
    view = await viewer(request)
    fields, name, scoped = await _entity_form(view)
    raw_id = _text(fields, "observation_id", 20)
    if not raw_id.isdigit():
        raise InvalidInput("The form names no observation to replace")
    result = await view.call(
        "supersede_observation",
        {**scoped, "entity_name": name, "observation_id": int(raw_id), "new_content": _text(fields, "new_content")},
    )
    flash = f"Observation #{result['superseded']['id']} superseded by #{result['current']['id']}"
    return view.redirect(entity_url(name, scoped.get("project", "")), flash=flash)


@router.post("/status")
async def set_status(request: Request) -> Response:
    """set_entity_status, then back to the entity page."""
    view = await viewer(request)
    fields, name, scoped = await _entity_form(view)
    result = await view.call(
        "set_entity_status", {**scoped, "entity_name": name, "status": _text(fields, "status", 32)}
    )
    flash = f"Status set to {status_label(result['status'])} (was {status_label(result['previous_status'])})"
    return view.redirect(entity_url(name, scoped.get("project", "")), flash=flash)
