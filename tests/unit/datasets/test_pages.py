"""app/datasets/pages.py: its helpers (numbers and links of the pages, quoted identifiers, the list of
files typed into a form), then its pages on the test server over plain HTTP: a file of the data root
registered and listed, profiled with histograms, queried (rows, a chart, errors next to the form), a
stored result paged and exported, and the export downloaded once download_export has checked it."""

from __future__ import annotations

import html
import re
import uuid

import pytest

from app.core.errors import Forbidden, InvalidInput, QueryError
from app.datasets import pages
from tests.support.console import signed_in
from tests.support.datasets import root_of
from tests.support.server import ADMIN_KEY, RunningServer


def test_helpers_of_the_pages() -> None:
    assert pages._int("", "offset", 7) == 7 and pages._int("12", "offset", 7) == 12
    with pytest.raises(InvalidInput):
        pages._int("twelve", "offset", 7)
    assert pages._url("") == "/ui/datasets"
    assert pages._url("/query", file="a b.csv", project="", offset=None) == "/ui/datasets/query?file=a+b.csv"
    assert pages.quoted('we"ird col') == '"we""ird col"'
    assert pages._files(" a.csv, b.csv\nc.csv ,,\n") == ["a.csv", "b.csv", "c.csv"]
    assert pages._default_sql("a.csv") == "SELECT * FROM data LIMIT 100" and pages._default_sql("") == ""
    shown = pages._error(QueryError("bad SQL", suggestions=["fix it"]))
    assert (shown["code"], shown["message"]) == (4004, "bad SQL")
    with pytest.raises(Forbidden):
        pages._error(Forbidden("no"))


@pytest.mark.slow  # the test server
async def test_a_file_is_registered_profiled_queried_exported_and_downloaded(server: RunningServer) -> None:
    name = f"regions_{uuid.uuid4().hex[:8]}"  # not sales_*: test_datasets globs those in the same root
    (root_of(server) / f"{name}.csv").write_text(
        "region,amount,units\n" + "".join(f"{r},{i * 1.5},{i}\n" for i, r in enumerate(["north", "south"] * 10))
    )
    async with signed_in(server.url, ADMIN_KEY) as console:
        made = await console.post("/ui/datasets/register", {"name": name, "path": f"{name}.csv", "project": "shop"})
        assert made.status_code == 303 and made.headers["location"] == "/ui/datasets?project=shop"
        assert console.flash(made).startswith(f"Dataset {name} registered (")
        again = await console.post("/ui/datasets/register", {"name": name, "path": f"{name}.csv", "project": "shop"})
        assert console.flash(again).startswith(f"Dataset {name} already registered")
        # Registered in "shop" only (the data root's files are listed to every project).
        assert f"file={name}&amp;" in await console.page("/ui/datasets", project="shop")
        assert f"file={name}&amp;" not in await console.page("/ui/datasets", project="elsewhere")

        profile = await console.page("/ui/datasets/profile", file=name, project="shop")
        assert "region" in profile and profile.count('src="data:image/png;base64,') == 2  # amount and units
        await console.page("/ui/datasets/profile", status=400, project="shop")

        prefilled = html.unescape(await console.page("/ui/datasets/query", file=name, project="shop"))
        assert "SELECT * FROM data LIMIT 100" in prefilled
        form = {"files": name, "project": "shop", "return_limit": "5"}
        ran = await console.post(
            "/ui/datasets/query", {**form, "query": "SELECT region, sum(units) AS n FROM data GROUP BY 1 ORDER BY 1"}
        )
        assert ran.status_code == 200 and "north" in ran.text and "south" in ran.text
        query_id = re.search(r"q_[0-9a-f]{16}", ran.text)
        assert query_id is not None
        drawn = await console.post("/ui/datasets/query", {**form, "query": "SELECT * FROM data", "chart_type": "bar"})
        assert 'src="data:image/png;base64,' in drawn.text
        odd = await console.post("/ui/datasets/query", {**form, "query": "SELECT 1", "chart_type": "pie"})
        assert "Unknown chart type" in html.unescape(odd.text) and 'role="alert"' in odd.text
        broken = await console.post("/ui/datasets/query", {**form, "query": "SELEC nothing"})
        assert broken.status_code == 200 and "Error 4004" in broken.text

        stored = await console.page(f"/ui/datasets/results/{query_id.group(0)}", project="shop")
        assert "north" in stored
        exported = await console.post(
            "/ui/datasets/export",
            {"query_id": query_id.group(0), "format": "csv", "filename": f"{name}.csv", "project": "shop"},
        )
        assert exported.status_code == 200
        link = re.search(r'href="(/ui/datasets/download\?[^"]+)"', exported.text)
        assert link is not None and f"path=exports/{name}.csv" in html.unescape(link.group(1)).replace("%2F", "/")
        got = await console.client.get(html.unescape(link.group(1)))
        assert got.status_code == 200 and got.text.splitlines() == ["region,n", "north,90", "south,100"]
        assert "sandbox" in got.headers["content-security-policy"]
        assert 'filename="' in got.headers["content-disposition"]
        refused = await console.client.get("/ui/datasets/download", params={"path": "../shop/x.csv", "project": "shop"})
        assert refused.status_code in (403, 404)
        failed = await console.post(
            "/ui/datasets/export",
            {"query_id": query_id.group(0), "format": "csv", "filename": f"{name}.csv", "project": "shop"},
        )
        assert 'role="alert"' in failed.text  # the file exists: the error is shown next to the form


@pytest.mark.slow  # the test server
async def test_a_file_is_uploaded_through_the_form_and_a_failed_query_names_its_project(server: RunningServer) -> None:
    name = f"upl_{uuid.uuid4().hex[:8]}"
    body = b"city,visits\nOslo,3\nLima,5\n"
    async with signed_in(server.url, ADMIN_KEY) as console:
        page = await console.page("/ui/datasets", project="uploads-lab")
        action = re.search(r'action="(/ui/datasets/upload\?[^"]+)" enctype="multipart/form-data"', page)
        assert action is not None and "project=uploads-lab" in action.group(1)
        files = {"file": ("visits.csv", body, "text/csv")}
        done = await console.client.post(html.unescape(action.group(1)), data={"name": name}, files=files)
        assert done.status_code == 303 and done.headers["location"] == "/ui/datasets?project=uploads-lab", done.text
        assert console.flash(done).startswith(f"Uploaded {len(body)} bytes as dataset {name} (")
        listed = await console.page("/ui/datasets")  # the project is remembered
        assert f'data-dataset="{name}"' in listed
        # The upload is the upload_dataset operation: audited with the console as its transport.
        audit = await console.page("/ui/admin/audit", operation="upload_dataset")
        row = re.search(r"<tr[^>]*>(?:(?!</tr>).)*upload_dataset(?:(?!</tr>).)*</tr>", audit, re.S)
        assert row is not None and "<td>console</td>" in row.group(0), audit[-3000:]
        # Without the session's token nothing is read or kept.
        forged = await console.client.post(
            "/ui/datasets/upload", params={"project": "uploads-lab"}, data={"name": f"{name}_x"}, files=files
        )
        assert forged.status_code == 403 and "security token" in forged.text
        assert f"{name}_x" not in await console.page("/ui/datasets")
        # A query whose input is not in the chosen project says which project was searched.
        missing = await console.post("/ui/datasets/query", {"query": "SELECT 1", "files": "orders", "project": ""})
        assert 'role="alert"' in missing.text
        assert "Searched in project <strong>uploads-lab</strong>" in missing.text


@pytest.mark.slow  # the test server
async def test_the_cache_page_lists_prices_and_drops(server: RunningServer) -> None:
    name = f"cached_{uuid.uuid4().hex[:8]}"
    (root_of(server) / f"{name}.csv").write_text("k,v\n" + "".join(f"k{i},{i}\n" for i in range(30)))
    project = f"cache-page-{uuid.uuid4().hex[:6]}"
    async with signed_in(server.url, ADMIN_KEY) as console:
        empty = await console.page("/ui/datasets/cache", project=project)
        assert "Nothing cached." in empty and "0 entries" in empty and 'aria-current="page">Cache<' in empty
        form = {"files": f"{name}.csv", "project": project, "return_limit": "10"}
        priced = await console.post("/ui/datasets/cache/estimate", {**form, "query": "SELECT * FROM data"})
        text = html.unescape(priced.text)
        assert priced.status_code == 200 and "30 rows · 10 in the reply" in text and " · fits" in text, text[-3000:]
        tight = html.unescape(
            (
                await console.post(
                    "/ui/datasets/cache/estimate", {**form, "query": "SELECT * FROM data", "max_tokens": "60"}
                )
            ).text
        )
        assert "rows fit" in tight and "max_tokens 60" in tight
        broken = await console.post("/ui/datasets/cache/estimate", {**form, "query": "SELECT nope FROM data"})
        assert "Error 4003" in broken.text
        await console.post("/ui/datasets/query", {**form, "query": "SELECT * FROM data"})
        listed = html.unescape(await console.page("/ui/datasets/cache", project=project))
        assert "1 entry" in listed and "SELECT * FROM data" in listed
        assert "SELECT * FROM data" not in html.unescape(
            await console.page("/ui/datasets/cache", project=project, pattern="nothing*")
        )
        dropped = await console.post("/ui/datasets/cache/invalidate", {"pattern": "*", "project": project})
        assert dropped.status_code == 303 and console.flash(dropped) == "Dropped 1 cache entry"
        assert "Nothing cached." in await console.page("/ui/datasets/cache", project=project)
