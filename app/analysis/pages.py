"""The console's analysis pages: the project's sessions, one session (its ingests, findings and page
summaries), queries over it (describe, aggregate with a chart, filter, sample, semantic), and forms to
ingest, act upstream and clear. Every read and write is an operation call through the executor.

Charts of aggregate groups are Vega-Lite specs drawn to PNG by `app.core.charts` (vl-convert in a
short-lived child process, never in the server's own)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import Request
from fastapi.responses import Response

from app.core.charts import vega_lite_png
from app.core.errors import CairnError, Forbidden, InvalidInput, Unauthenticated
from app.core.ui import (
    ConsoleSection,
    Recent,
    Tally,
    Viewer,
    chosen_project,
    console_router,
    form_text,
    viewer,
    whole_number,
    with_project,
)

log = logging.getLogger("cairn.console.analysis")

router = console_router("/analysis")
MODES = ("describe", "aggregate", "filter", "sample", "semantic")
PAGE = 20
RUNS = 10  # act runs listed on a session's page (each run's page lists its ids)
RUN_IDS = 100  # failed and unknown ids per act run page (the most analysis_act_runs pages)
CHART_GROUPS = 40  # bars drawn of an aggregate (the table lists every group returned)
LABEL_CHARS = 40


# ---------------------------------------------------------------------------------------------- helpers


def _json_field(raw: str, name: str) -> dict[str, Any] | None:
    """A JSON object typed into a form field (None when empty)."""
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"'{name}' is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            suggestions=['Write an object such as {"status": "completed", "rating": {"$lt": 2}}'],
        ) from None
    if not isinstance(value, dict):
        raise InvalidInput(f"'{name}' must be a JSON object", suggestions=['e.g. {"status": "completed"}'])
    return value


def _session_url(aid: str, project: str) -> str:
    url = f"/ui/analysis/sessions/{quote(aid, safe='')}"
    return url + (f"?{urlencode({'project': project})}" if project else "")


def _error(exc: CairnError) -> dict[str, Any]:
    """An error shown on the page next to the form that caused it (refusals still get the error page)."""
    if isinstance(exc, Forbidden | Unauthenticated):
        raise exc
    body: dict[str, Any] = exc.body()["error"]
    return body


def describe_blocks(text: str) -> list[dict[str, Any]]:
    """describe's markdown as blocks to render: headings, tables (head + rows) and lines of text."""
    blocks: list[dict[str, Any]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            blocks.append({"kind": "heading", "text": stripped.lstrip("#").strip()})
        elif stripped.startswith("|"):
            cells = [c.strip() for c in stripped.strip("|").split("|")]
            if all(c and set(c) <= set("-: ") for c in cells):
                continue  # the separator under a table's head
            if blocks and blocks[-1]["kind"] == "table":
                blocks[-1]["rows"].append(cells)
            else:
                blocks.append({"kind": "table", "head": cells, "rows": []})
        elif stripped:
            blocks.append({"kind": "text", "text": stripped})
    return blocks


def row_columns(rows: list[dict[str, Any]]) -> list[str]:
    """Every key of the rows, in first-seen order."""
    return list(dict.fromkeys(k for row in rows for k in row))


def _label(value: Any) -> str:
    text = "(null)" if value is None else value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def aggregate_spec(field: str, groups: list[dict[str, Any]]) -> dict[str, Any]:
    """A horizontal bar chart of an aggregate's groups (largest first), as a Vega-Lite v5 spec."""
    values = [{"value": _label(g["value"]), "count": g["count"], "percent": g["percent"]} for g in groups]
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
        "background": "white",
        "width": 480,
        "data": {"values": values[:CHART_GROUPS]},
        "mark": {"type": "bar", "color": "#1f5fa8"},
        "encoding": {
            "y": {"field": "value", "type": "nominal", "sort": "-x", "title": field, "axis": {"labelLimit": 200}},
            "x": {"field": "count", "type": "quantitative", "title": "records"},
            "tooltip": [{"field": "value"}, {"field": "count"}, {"field": "percent"}],
        },
    }


async def overview(view: Viewer, project: str) -> list[Tally]:
    """The home page's analysis tally of `project`: its sessions, the most recently active first."""
    listed = await view.call("analysis_sessions", {"project": project, "limit": 5})
    return [
        Tally(
            title="Analysis sessions",
            count=listed["total"],
            href=f"/ui/analysis?{urlencode({'project': project})}",
            recent=[
                Recent(
                    s["analysis_id"],
                    _session_url(s["analysis_id"], project),
                    s["last_activity"],
                    f"{s['records']} records",
                )
                for s in listed["sessions"]
            ],
        )
    ]


SECTIONS = (
    ConsoleSection(
        title="Analysis",
        path="/ui/analysis",
        router=router,
        templates=Path(__file__).parent / "templates",
        overview=overview,
    ),
)


# ---------------------------------------------------------------------------------------------- pages


@router.get("")
async def sessions_page(request: Request) -> Response:
    """The project's analysis sessions, most recently active first."""
    view = await viewer(request)
    project = chosen_project(request)
    offset = max(whole_number(request.query_params.get("offset", ""), "offset") or 0, 0)
    listed = await view.call("analysis_sessions", with_project({"limit": PAGE, "offset": offset}, project))
    return view.render(
        "analysis/sessions.html",
        listed=listed,
        project=project,
        offset=offset,
        page=PAGE,
        session_url=lambda aid: _session_url(aid, project),
    )


@router.post("/ingest")
async def start_session(request: Request) -> Response:
    """Ingest a model into a session (new or existing), then open the session."""
    view = await viewer(request)
    fields = await view.form()
    project = chosen_project(request, fields)
    aid = form_text(fields, "analysis_id")
    ingest = await _ingest(view, fields, aid, project)
    return view.redirect(_session_url(aid, project), flash=ingest["message"])


async def _ingest(view: Viewer, fields: dict[str, Any], aid: str, project: str) -> dict[str, Any]:
    args: dict[str, Any] = {"analysis_id": aid, "model": form_text(fields, "model")}
    per_page = whole_number(form_text(fields, "per_page"), "per_page")
    if per_page is not None:
        args["per_page"] = per_page
    page = whole_number(form_text(fields, "page"), "page")
    if page is not None:
        args["page"] = page
    filters = _json_field(form_text(fields, "filters"), "filters")
    if filters:
        args["filters"] = filters
    for flag in ("ingest_all", "resume"):
        if form_text(fields, flag):
            args[flag] = True
    return await view.call("analysis_ingest", with_project(args, project))


async def _session(view: Viewer, aid: str, project: str) -> dict[str, Any]:
    return await view.call("analysis_session", with_project({"analysis_id": aid}, project))


@router.get("/sessions/{analysis_id}")
async def session_page(request: Request, analysis_id: str) -> Response:
    """One session; with `mode` in the query string, the result of that analysis_query too."""
    view = await viewer(request)
    project = chosen_project(request)
    session = await _session(view, analysis_id, project)
    params = request.query_params
    query: dict[str, Any] = {k: params.get(k, "").strip() for k in ("mode", "model", "group_by", "where", "query")}
    query["limit"] = params.get("limit", "").strip()
    result, error, chart = None, None, None
    if query["mode"]:
        try:
            result, chart = await _run_query(view, analysis_id, project, query)
        except CairnError as exc:
            error = _error(exc)
    return await _render_session(view, session, project, qform=query, result=result, query_error=error, chart=chart)


async def _run_query(view: Viewer, aid: str, project: str, query: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    mode = query["mode"]
    if mode not in MODES:
        raise InvalidInput(f"Unknown mode {mode[:40]!r}", suggestions=[f"Modes: {', '.join(MODES)}"])
    args: dict[str, Any] = {"analysis_id": aid, "mode": mode}
    if query["model"]:
        args["model"] = query["model"]
    if mode == "aggregate" and query["group_by"]:
        args["group_by"] = query["group_by"]
    if mode in ("aggregate", "filter", "sample"):
        where = _json_field(query["where"], "where")
        if where:
            args["where"] = where
    if mode == "semantic" and query["query"]:
        args["query"] = query["query"]
    limit = whole_number(query["limit"], "limit")
    if limit is not None:
        if mode in ("aggregate", "filter"):
            args["limit"] = limit
        elif mode == "sample":
            args["sample_size"] = limit
        elif mode == "semantic":
            args["top_k"] = limit
    result = await view.call("analysis_query", with_project(args, project))
    chart = None
    if mode == "aggregate" and result.get("groups"):
        chart = await vega_lite_png(aggregate_spec(query["group_by"], result["groups"]))
    return result, chart


async def _render_session(view: Viewer, session: dict[str, Any], project: str, **context: Any) -> Response:
    context.setdefault("qform", {"mode": "", "model": "", "group_by": "", "where": "", "query": "", "limit": ""})
    for name in ("result", "query_error", "chart", "act", "act_error", "act_form", "ingest_error"):
        context.setdefault(name, None)
    aid = session["analysis_id"]
    base = f"/ui/analysis/sessions/{quote(aid, safe='')}"
    runs = await view.call("analysis_act_runs", with_project({"analysis_id": aid, "limit": RUNS}, project))
    return view.render(
        "analysis/session.html",
        session=session,
        project=project,
        base=base,
        runs=runs,
        project_query=f"?{urlencode({'project': project})}" if project else "",
        back=f"/ui/analysis{'?' + urlencode({'project': project}) if project else ''}",
        modes=MODES,
        describe_blocks=describe_blocks,
        row_columns=row_columns,
        **context,
    )


@router.post("/sessions/{analysis_id}/act")
async def act(request: Request, analysis_id: str) -> Response:
    """Run analysis_act (a dry run unless asked otherwise) and show what succeeded and failed."""
    view = await viewer(request)
    fields = await view.form()
    project = chosen_project(request, fields)
    form: dict[str, Any] = {
        k: form_text(fields, k) for k in ("model", "action", "where", "attributes", "deadline_seconds")
    }
    form["dry_run"] = bool(form_text(fields, "dry_run"))
    result, error = None, None
    try:
        args: dict[str, Any] = {
            "analysis_id": analysis_id,
            "model": form["model"],
            "action": form["action"],
            "dry_run": form["dry_run"],
        }
        where = _json_field(form["where"], "where")
        if where:
            args["where"] = where
        attributes = _json_field(form["attributes"], "attributes")
        if attributes:
            args["attributes"] = attributes
        deadline = whole_number(form["deadline_seconds"], "deadline_seconds")
        if deadline is not None:
            args["deadline_seconds"] = deadline
        result = await view.call("analysis_act", with_project(args, project))
    except CairnError as exc:
        error = _error(exc)
    session = await _session(view, analysis_id, project)
    return await _render_session(view, session, project, act=result, act_error=error, act_form=form)


@router.post("/sessions/{analysis_id}/ingest")
async def ingest_more(request: Request, analysis_id: str) -> Response:
    """Ingest (more of) a model into this session."""
    view = await viewer(request)
    fields = await view.form()
    project = chosen_project(request, fields)
    try:
        done = await _ingest(view, fields, analysis_id, project)
    except CairnError as exc:
        session = await _session(view, analysis_id, project)
        return await _render_session(view, session, project, ingest_error=_error(exc))
    return view.redirect(_session_url(analysis_id, project), flash=done["message"])


@router.post("/sessions/{analysis_id}/clear")
async def clear(request: Request, analysis_id: str) -> Response:
    """Delete the session's records and findings."""
    view = await viewer(request)
    fields = await view.form()
    project = chosen_project(request, fields)
    done = await view.call("analysis_clear", with_project({"analysis_id": analysis_id}, project))
    back = "/ui/analysis" + (f"?{urlencode({'project': project})}" if project else "")
    return view.redirect(back, flash=done["message"])


@router.get("/sessions/{analysis_id}/act-runs/{run_id}")
async def act_run_page(request: Request, analysis_id: str, run_id: str) -> Response:
    """One act run: what, when, by which key, its outcome and its failed and unknown ids (paged)."""
    view = await viewer(request)
    project = chosen_project(request)
    number = whole_number(run_id, "run_id")
    offset = max(whole_number(request.query_params.get("offset", ""), "offset") or 0, 0)
    args = {"analysis_id": analysis_id, "run_id": number, "limit": RUN_IDS, "offset": offset}
    shown = await view.call("analysis_act_runs", with_project(args, project))
    base = f"/ui/analysis/sessions/{quote(analysis_id, safe='')}"
    next_url = None
    if shown["next_offset"] is not None:
        query = {"offset": shown["next_offset"], **({"project": project} if project else {})}
        next_url = f"{base}/act-runs/{number}?{urlencode(query)}"
    return view.render(
        "analysis/act_run.html",
        analysis_id=analysis_id,
        run=shown["runs"][0],
        message=shown["message"],
        back=_session_url(analysis_id, project),
        next_url=next_url,
    )
