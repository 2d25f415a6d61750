"""The console's datasets pages: the project's datasets and data files, a profile as a readable page
(with a histogram per numeric column), SQL queries with a result table and a chart, stored results,
exports and their download, and an upload form. Every read and write is an operation call through the
executor; a download is streamed only after `download_export` has checked that the caller may read
the file, and an upload is the `upload_dataset` operation reading the form's body, as over REST."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import FileResponse, Response

from app.core.errors import CairnError, Forbidden, InvalidInput, Unauthenticated
from app.core.ui import (
    SECURITY_HEADERS,
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
from app.datasets.routes import upload_body

router = console_router("/datasets")
UPLOAD_PATH = "/ui/datasets/upload"
PAGE = 50
NUMERIC = ("int64", "float64")
HISTOGRAMS = 6  # numeric columns given a histogram on a profile page
CHART_TYPES = ("bar", "line", "scatter", "histogram", "heatmap")
EXPORT_FORMATS = ("csv", "parquet", "json", "xlsx")
MAX_TOKENS = 20_000  # the console shows more than an agent's default answer
ROWS_SHOWN = 100


def _int(raw: str, name: str, default: int) -> int:
    number = whole_number(raw, name)
    return default if number is None else number


def _url(page: str, /, **params: Any) -> str:
    """A datasets page's URL with its query string (empty values left out)."""
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return f"/ui/datasets{page}" + (f"?{urlencode(kept)}" if kept else "")


def _error(exc: CairnError) -> dict[str, Any]:
    """An error shown next to the form that caused it (refusals still get the error page)."""
    if isinstance(exc, Forbidden | Unauthenticated):
        raise exc
    body: dict[str, Any] = exc.body()["error"]
    return body


def quoted(column: str) -> str:
    """A column name as a SQL identifier."""
    return '"' + column.replace('"', '""') + '"'


def _files(raw: str) -> list[str]:
    return [f.strip() for f in raw.replace("\n", ",").split(",") if f.strip()]


async def overview(view: Viewer, project: str) -> list[Tally]:
    """The home page's datasets tally of `project`: its registered datasets (list_datasets, no file scan)."""
    listed = await view.call("list_datasets", {"project": project, "limit": 5, "include_files": False})
    return [
        Tally(
            title="Datasets",
            count=listed["total"],
            href=_url("", project=project),
            recent=[
                Recent(d["name"], _url("/profile", file=d["name"], project=project), d["created_at"], d["format"])
                for d in listed["datasets"]
            ],
        )
    ]


SECTIONS = (
    ConsoleSection(
        title="Datasets",
        path="/ui/datasets",
        router=router,
        templates=Path(__file__).parent / "templates",
        overview=overview,
    ),
)


# ---------------------------------------------------------------------------------------------- list


@router.get("")
async def datasets_page(request: Request) -> Response:
    """Registered datasets and the data files of the project's readable folders."""
    view = await viewer(request)
    project = chosen_project(request)
    offset = max(_int(request.query_params.get("offset", ""), "offset", 0), 0)
    listed = await view.call("list_datasets", with_project({"limit": PAGE, "offset": offset}, project))
    return view.render("datasets/list.html", listed=listed, project=project, offset=offset, page=PAGE, url=_url)


@router.post("/register")
async def register(request: Request) -> Response:
    """Give a file of the data roots a name."""
    view = await viewer(request)
    fields = await view.form()
    project = chosen_project(request, fields)
    args = {k: form_text(fields, k) for k in ("name", "path", "description")}
    done = await view.call("register_dataset", with_project(args, project))
    verb = "registered" if done["created"] else "already registered"
    return view.redirect(
        _url("", project=project), flash=f"Dataset {done['dataset']['name']} {verb} ({done['dataset']['path']})"
    )


@router.post("/upload")
async def upload(request: Request) -> Response:
    """Upload a file into the project's `uploads/` folder and register it: the `upload_dataset`
    operation, which reads the multipart body itself (after its rate limit, scope and project checks),
    exactly as the REST route runs it. The CSRF token and the project come in the query string."""
    view = await viewer(request)
    view.check_token(request.query_params.get("csrf", ""))
    project = chosen_project(request)
    async with upload_body(request):
        done = await view.call("upload_dataset", with_project({}, project))
    dataset = done["dataset"]
    return view.redirect(
        _url("", project=project),
        flash=f"Uploaded {done['bytes']:,} bytes as dataset {dataset['name']} ({dataset['path']})",
    )


# ---------------------------------------------------------------------------------------------- profile


@router.get("/profile")
async def profile_page(request: Request) -> Response:
    """A dataset's profile: statistics, recommendations, every column, histograms of numeric columns."""
    view = await viewer(request)
    project = chosen_project(request)
    file = request.query_params.get("file", "").strip()
    if not file:
        raise InvalidInput("Say which dataset to profile (?file=name or path)")
    profile = await view.call(
        "profile_dataset",
        with_project({"file_path": file, "detail": "full", "max_categories": 10, "max_tokens": MAX_TOKENS}, project),
    )
    histograms: dict[str, Any] = {}
    numeric = [c["name"] for c in profile["schema"]["columns"] if isinstance(c, dict) and c["type"] in NUMERIC]
    for column in numeric[:HISTOGRAMS]:
        histograms[column] = await _histogram(view, file, column, project)
    return view.render(
        "datasets/profile.html",
        profile=profile,
        file=file,
        project=project,
        histograms=histograms,
        histograms_left=max(len(numeric) - HISTOGRAMS, 0),
        url=_url,
    )


async def _histogram(view: Viewer, file: str, column: str, project: str) -> dict[str, Any]:
    """The datasets family's histogram chart of one column over every row (a PNG), or the error."""
    try:
        out = await view.call(
            "execute_query",
            with_project(
                {
                    "query": f"SELECT {quoted(column)} FROM data",
                    "files": [file],
                    "return_format": "chart",
                    "chart_type": "histogram",
                    "chart_format": "png",
                    "cache_key": f"console histogram {column}"[:200],
                },
                project,
            ),
        )
    except CairnError as exc:
        return {"error": _error(exc)}
    viz = out.get("visualization") or {}
    return {"png": viz.get("base64_image"), "notes": viz.get("notes") or []}


# ---------------------------------------------------------------------------------------------- query


def _default_sql(file: str) -> str:
    return "SELECT * FROM data LIMIT 100" if file else ""


@router.get("/query")
async def query_page(request: Request) -> Response:
    """The SQL form (its inputs prefilled from ?file=)."""
    view = await viewer(request)
    project = chosen_project(request)
    file = request.query_params.get("file", "").strip()
    form = {"query": _default_sql(file), "files": file, "chart_type": "", "return_limit": str(ROWS_SHOWN)}
    return _render_query(view, project, form)


def _render_query(view: Viewer, project: str, form: dict[str, Any], **context: Any) -> Response:
    for name in ("result", "error", "exported", "export_error"):
        context.setdefault(name, None)
    return view.render(
        "datasets/query.html",
        form=form,
        project=project,
        chart_types=CHART_TYPES,
        formats=EXPORT_FORMATS,
        url=_url,
        **context,
    )


@router.post("/query")
async def run_query(request: Request) -> Response:
    """Run execute_query and show its first rows, the chart and the stored result's export form."""
    view = await viewer(request)
    fields = await view.form()
    project = chosen_project(request, fields)
    form = {k: form_text(fields, k) for k in ("query", "files", "chart_type", "return_limit")}
    result, error = None, None
    try:
        args: dict[str, Any] = {
            "query_type": "sql",
            "query": form["query"],
            "files": _files(form["files"]),
            "return_limit": _int(form["return_limit"], "return_limit", ROWS_SHOWN),
            "max_tokens": MAX_TOKENS,
        }
        if form["chart_type"]:
            if form["chart_type"] not in CHART_TYPES:
                raise InvalidInput(f"Unknown chart type {form['chart_type'][:40]!r}")
            args.update(generate_chart=True, chart_type=form["chart_type"], chart_format="png")
        result = await view.call("execute_query", with_project(args, project))
    except CairnError as exc:
        error = _error(exc)
    return _render_query(view, project, form, result=result, error=error)


@router.get("/results/{query_id}")
async def result_page(request: Request, query_id: str) -> Response:
    """A page of a stored result (get_result), with the export form."""
    view = await viewer(request)
    project = chosen_project(request)
    offset = max(_int(request.query_params.get("offset", ""), "offset", 0), 0)
    page = await view.call(
        "get_result",
        with_project({"query_id": query_id, "offset": offset, "limit": ROWS_SHOWN, "max_tokens": MAX_TOKENS}, project),
    )
    return view.render(
        "datasets/result.html", page=page, project=project, formats=EXPORT_FORMATS, url=_url, exported=None
    )


# ---------------------------------------------------------------------------------------------- exports


@router.post("/export")
async def export(request: Request) -> Response:
    """Export a stored result into the project's folder, then offer its files for download."""
    view = await viewer(request)
    fields = await view.form()
    project = chosen_project(request, fields)
    args: dict[str, Any] = {
        "query_id": form_text(fields, "query_id"),
        "format": form_text(fields, "format") or "csv",
        "destination": form_text(fields, "destination") or "exports",
        "list_files": True,  # the page offers each file for download
    }
    filename = form_text(fields, "filename")
    if filename:
        args["filename"] = filename
    if form_text(fields, "overwrite"):
        args["overwrite"] = True
    exported, error = None, None
    try:
        exported = await view.call("export_result", with_project(args, project))
    except CairnError as exc:
        error = _error(exc)
    return view.render(
        "datasets/exported.html",
        exported=exported,
        error=error,
        project=project,
        query_id=args["query_id"],
        formats=EXPORT_FORMATS,
        url=_url,
    )


@router.get("/download")
async def download(request: Request) -> Response:
    """Stream a file of the project's folder, once download_export has checked the caller may read it."""
    view = await viewer(request)
    project = chosen_project(request)
    checked = await view.call("download_export", with_project({"path": request.query_params.get("path", "")}, project))
    headers = {k: v for k, v in SECURITY_HEADERS.items() if k != "Content-Security-Policy"}
    return FileResponse(
        checked["path"],
        media_type=checked["media_type"],
        filename=checked["name"],
        headers={**headers, "Content-Security-Policy": "default-src 'none'; sandbox"},
    )


# ---------------------------------------------------------------------------------------------- cache


def _render_cache(view: Viewer, project: str, pattern: str, offset: int, **context: Any) -> Response:
    form = context.pop("form", None) or {"query": "", "files": "", "return_limit": str(ROWS_SHOWN), "max_tokens": ""}
    for name in ("estimate", "error"):
        context.setdefault(name, None)
    return view.render(
        "datasets/cache.html",
        project=project,
        pattern=pattern,
        offset=offset,
        page_size=PAGE,
        form=form,
        url=_url,
        **context,
    )


async def _cache_listing(view: Viewer, project: str, pattern: str, offset: int) -> dict[str, Any]:
    args: dict[str, Any] = {"limit": PAGE, "offset": offset, **({"pattern": pattern} if pattern else {})}
    return await view.call("cache_manager", with_project(args, project))


@router.get("/cache")
async def cache_page(request: Request) -> Response:
    """What the result cache holds (cache_manager), a form that drops entries (cache_invalidate) and one
    that prices a query before it runs (context_optimizer)."""
    view = await viewer(request)
    project = chosen_project(request)
    pattern = request.query_params.get("pattern", "").strip()[:200]
    offset = max(_int(request.query_params.get("offset", ""), "offset", 0), 0)
    listed = await _cache_listing(view, project, pattern, offset)
    return _render_cache(view, project, pattern, offset, listed=listed)


@router.post("/cache/estimate")
async def estimate_query(request: Request) -> Response:
    """Price a query with context_optimizer and show the estimate beside the cache's entries."""
    view = await viewer(request)
    fields = await view.form()
    project = chosen_project(request, fields)
    form = {k: form_text(fields, k) for k in ("query", "files", "return_limit", "max_tokens")}
    estimate, error = None, None
    try:
        args: dict[str, Any] = {
            "query": form["query"],
            "files": _files(form["files"]),
            "return_limit": _int(form["return_limit"], "return_limit", ROWS_SHOWN),
        }
        if form["max_tokens"]:
            args["max_tokens"] = _int(form["max_tokens"], "max_tokens", 0)
        estimate = await view.call("context_optimizer", with_project(args, project))
    except CairnError as exc:
        error = _error(exc)
    listed = await _cache_listing(view, project, "", 0)
    return _render_cache(view, project, "", 0, listed=listed, form=form, estimate=estimate, error=error)


@router.post("/cache/invalidate")
async def invalidate(request: Request) -> Response:
    """Drop the entries matching a pattern (cache_invalidate)."""
    view = await viewer(request)
    fields = await view.form()
    project = chosen_project(request, fields)
    done = await view.call("cache_invalidate", with_project({"pattern": form_text(fields, "pattern", 200)}, project))
    count = done["invalidated_count"]
    return view.redirect(
        _url("/cache", project=project), flash=f"Dropped {count} cache entr{'y' if count == 1 else 'ies'}"
    )
