"""app/analysis/pages.py: its helpers (JSON typed into a form, session links, describe's markdown as
blocks, the columns of rows, the aggregate chart's spec), then its pages on the test server over plain
HTTP against the demo upstream: a session ingested from the form, queried (a chart for an aggregate, a
form error shown next to the form), acted on in a dry run and live (the run listed, its page shown), and
cleared."""

from __future__ import annotations

import html
import re

import pytest

from app.analysis import pages
from app.core.errors import Forbidden, InvalidInput, NotFound
from tests.support import analysis as analysis_helpers
from tests.support.analysis import Upstream
from tests.support.console import signed_in
from tests.support.server import ADMIN_KEY, RunningServer

upstream = analysis_helpers.upstream
bookshelf = analysis_helpers.bookshelf


def test_json_typed_into_a_form_must_be_an_object() -> None:
    assert pages._json_field("", "where") is None
    assert pages._json_field('{"a": {"$lt": 2}}', "where") == {"a": {"$lt": 2}}
    with pytest.raises(InvalidInput, match=r"'where' is not valid JSON: .*line 1, column 2"):
        pages._json_field("{oops", "where")
    with pytest.raises(InvalidInput, match="must be a JSON object"):
        pages._json_field("[1]", "filters")


def test_session_links_and_errors_next_to_their_form() -> None:
    assert pages._session_url("a/b c", "") == "/ui/analysis/sessions/a%2Fb%20c"
    assert pages._session_url("s", "my lab") == "/ui/analysis/sessions/s?project=my+lab"
    shown = pages._error(NotFound("gone", suggestions=["retry"]))
    assert (shown["code"], shown["message"], shown["suggestions"]) == (4002, "gone", ["retry"])
    with pytest.raises(Forbidden):
        pages._error(Forbidden("no"))  # refusals get the error page instead


def test_describe_markdown_becomes_blocks() -> None:
    text = "### book: 3 records\n| field | type |\n|---|---|\n| id | integer |\n| title | string |\n\nExamples: x"
    assert pages.describe_blocks(text) == [
        {"kind": "heading", "text": "book: 3 records"},
        {"kind": "table", "head": ["field", "type"], "rows": [["id", "integer"], ["title", "string"]]},
        {"kind": "text", "text": "Examples: x"},
    ]
    assert pages.row_columns([{"a": 1, "b": 2}, {"c": 3, "a": 4}]) == ["a", "b", "c"]


def test_the_aggregate_chart_draws_labelled_bars() -> None:
    groups = [{"value": v, "count": 45 - i, "percent": 1.0} for i, v in enumerate([None, "x" * 60, *range(43)])]
    spec = pages.aggregate_spec("status", groups)
    values = spec["data"]["values"]
    assert len(values) == pages.CHART_GROUPS and values[0]["value"] == "(null)"
    assert values[1]["value"] == "x" * 39 + "…" and values[2]["value"] == "0"
    assert spec["encoding"]["y"]["title"] == "status" and spec["mark"]["type"] == "bar"


@pytest.mark.slow  # the test server
async def test_a_session_is_ingested_queried_acted_on_and_cleared(server: RunningServer, bookshelf: Upstream) -> None:
    async with signed_in(server.url, ADMIN_KEY) as console:
        made = await console.post(
            "/ui/analysis/ingest", {"analysis_id": "shelf", "model": "book", "per_page": "20", "project": "lab"}
        )
        assert made.status_code == 303 and made.headers["location"] == "/ui/analysis/sessions/shelf?project=lab"
        assert "20" in console.flash(made)
        listed = await console.page("/ui/analysis", project="lab")
        assert "/ui/analysis/sessions/shelf?project=lab" in html.unescape(listed)
        base = "/ui/analysis/sessions/shelf"
        chart = await console.page(base, project="lab", mode="aggregate", group_by="status")
        assert 'src="data:image/png;base64,' in chart and "Bar chart of status" in chart
        bad = await console.page(base, project="lab", mode="filter", where="{oops")
        assert re.search(r'role="alert">\s*<p><strong>Error 4001</strong>', bad) and "not valid JSON" in bad
        odd = await console.page(base, project="lab", mode="guess")
        assert "Unknown mode" in html.unescape(odd)
        dry = await console.post(
            f"{base}/act",
            {"model": "book", "action": "delete", "dry_run": "1", "where": '{"status": "unread"}', "project": "lab"},
        )
        assert dry.status_code == 200 and "Dry run" in dry.text and "nothing was sent upstream" in dry.text
        assert "No act run yet." in dry.text  # a dry run is not recorded
        live = await console.post(
            f"{base}/act",
            {"model": "book", "action": "update", "attributes": '{"status": "reading"}', "project": "lab"},
        )
        found = re.search(r'href="(/ui/analysis/sessions/shelf/act-runs/(\d+)\?project=lab)"', live.text)
        assert live.status_code == 200 and 'id="act-runs-table"' in live.text and found is not None
        run = await console.page(html.unescape(found.group(1)).split("?")[0], project="lab")
        assert f"Act run {found.group(2)}" in run and "(over console)" in run and "Failed ids (" in run
        await console.page(f"{base}/act-runs/999999", status=404, project="lab")
        cleared = await console.post(f"{base}/clear", {"project": "lab"})
        assert cleared.status_code == 303 and cleared.headers["location"] == "/ui/analysis?project=lab"
        assert "Cleared 20 ingested record(s)" in console.flash(cleared)
        assert "/ui/analysis/sessions/shelf" not in await console.page("/ui/analysis", project="lab")
