"""The console's datasets pages in a real headless Chromium: the list, a profile with histograms, a
SQL query with its table and chart, an export downloaded (its bytes checked), and the refusals: a
read-only key may not export, and a download never leaves the caller's project folder."""

from __future__ import annotations

import base64
import csv
import io
from collections import defaultdict
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from tests.support.browser import PHONE, new_page, shot, sign_in
from tests.support.datasets import project_folder, root_of
from tests.support.server import ADMIN_KEY, PROJECT_KEY, READ_KEY, RunningServer

pytestmark = pytest.mark.slow

REGIONS = ("north", "south", "east", "west")
ROWS = 240


def _sales() -> list[tuple[str, int, float, str]]:
    """Deterministic rows: region, units, price, day."""
    return [
        (
            REGIONS[i % 4 if i % 7 else 0],
            (i * 37) % 50 + 1,
            round(2.5 + (i * 13) % 97 / 4, 2),
            f"2026-01-{i % 28 + 1:02d}",
        )
        for i in range(ROWS)
    ]


@pytest.fixture
async def sales(server: RunningServer, rest: httpx.AsyncClient) -> list[tuple[str, int, float, str]]:
    """sales.csv in the server's data root, registered as the dataset `sales`."""
    rows = _sales()
    # `note` is mostly empty, which the profile recommends doing something about.
    notes = ["promo" if i % 3 == 0 else "" for i in range(ROWS)]
    lines = [
        "region,units,price,day,note",
        *(f"{r},{u},{p},{d},{n}" for (r, u, p, d), n in zip(rows, notes, strict=True)),
    ]
    (root_of(server) / "sales.csv").write_text("\n".join(lines) + "\n")
    r = await rest.post(
        "/api/v1/datasets/register", json={"name": "sales", "path": "sales.csv", "description": "Daily sales"}
    )
    assert r.status_code == 200, r.text
    return rows


async def _png(page: Page, img_selector: str) -> tuple[int, int]:
    """The natural size of one data: PNG on the page, checked to be a PNG that the browser decoded."""
    img = page.locator(img_selector)
    src = await img.get_attribute("src")
    assert src is not None and src.startswith("data:image/png;base64,")
    assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = await img.evaluate("i => [i.naturalWidth, i.naturalHeight]")
    assert width > 100 and height > 100, (width, height)
    return int(width), int(height)


def read_bytes(path: Path) -> bytes:
    return path.read_bytes()


BY_REGION = "SELECT region, sum(units) AS units FROM data GROUP BY region ORDER BY region"


async def _run_query(page: Page, sql: str, chart: str = "bar") -> None:
    await page.fill("#sql", sql)
    await page.select_option("select[name=chart_type]", chart)
    await page.click("form[aria-label='SQL query'] button[type=submit]")


async def test_list_profile_query_export_and_download(
    server: RunningServer, browser: Browser, sales: list[tuple[str, int, float, str]]
) -> None:
    async with new_page(browser) as page:
        await sign_in(page, server.url, ADMIN_KEY, "/ui/datasets")
        row = page.locator("#datasets tr[data-dataset=sales]")
        await expect(row).to_contain_text("sales.csv")
        await expect(row).to_contain_text("Daily sales")
        await expect(page.locator("#files")).to_contain_text("sales.csv")
        await shot(page, "datasets-list")

        # The profile: statistics, columns, top values and a histogram per numeric column.
        await row.locator("a", has_text="sales").first.click()
        await page.wait_for_url("**/ui/datasets/profile?file=sales*")
        await expect(page.locator("#profile-stats")).to_contain_text(str(ROWS))
        columns = page.locator("#columns tbody tr")
        await expect(columns).to_have_count(5)
        await expect(page.locator("#recommendations")).to_contain_text("'note' is 67% empty")
        await expect(columns.nth(1)).to_contain_text("int64")
        region = page.locator("section[data-column=region]")
        counts: dict[str, int] = defaultdict(int)
        for r, *_ in sales:
            counts[r] += 1
        top = region.locator("table.top-values tbody tr").first
        best = max(counts.items(), key=lambda kv: kv[1])
        await expect(top).to_contain_text(best[0])
        await expect(top).to_contain_text(str(best[1]))
        for name in ("units", "price"):
            img = f"section[data-column={name}] figure.chart img"
            await expect(page.locator(img)).to_have_attribute("alt", f"Histogram of {name}")
            await _png(page, img)
        units = page.locator("section[data-column=units] dl.facts")
        await expect(units).to_contain_text(f"max{max(u for _, u, _, _ in sales)}")
        await expect(page.locator("section[data-column=region] figure.chart")).to_have_count(0)
        await shot(page, "datasets-profile")

        # A query: the rows as a table and the bar chart of the whole result.
        await page.click("text=Query this dataset")
        await expect(page.locator("#sql")).to_have_value("SELECT * FROM data LIMIT 100")
        await expect(page.locator("input[name=files]")).to_have_value("sales")
        await _run_query(page, BY_REGION)
        result = page.locator("#query-result")
        await expect(result).to_contain_text("4 rows")
        want: dict[str, int] = defaultdict(int)
        for r, u, *_ in sales:
            want[r] += u
        cells = await result.locator("table tbody tr").all_inner_texts()
        assert [tuple(c.split("\t")) for c in cells] == [(r, str(want[r])) for r in sorted(want)], cells
        await _png(page, "#query-result figure.chart img")
        query_id = (await page.locator("#query-id").inner_text()).strip()
        assert query_id.startswith("q_")
        await shot(page, "datasets-query")

        # Export it as CSV and download the file: the bytes are the result's.
        await page.select_option("#export-form select[name=format]", "csv")
        await page.fill("#export-form input[name=filename]", "by_region.csv")
        await page.click("#export-form button[type=submit]")
        link = page.locator("#exported-files a", has_text="by_region.csv")
        await expect(link).to_have_count(1)
        # The page names the file as the tools do: relative to the project's folder, no host path.
        await expect(page.locator("[role=status]")).to_contain_text("exports/by_region.csv in the project's folder")
        await expect(page.locator("[role=status]")).not_to_contain_text(str(project_folder(server)))
        await shot(page, "datasets-exported")
        async with page.expect_download() as info:
            await link.click()
        download = await info.value
        assert download.suggested_filename == "by_region.csv"
        body = read_bytes(await download.path())
        assert body == read_bytes(project_folder(server) / "exports" / "by_region.csv")
        parsed = list(csv.reader(io.StringIO(body.decode())))
        assert parsed == [["region", "units"], *([r, str(want[r])] for r in sorted(want))]

        # The same export again is refused without overwrite: the error shows next to the form.
        await page.fill("#export-form input[name=filename]", "by_region.csv")
        await page.click("#export-form button[type=submit]")
        await expect(page.locator("[role=alert]")).to_contain_text("4090")

        # A stored result page, with its rows.
        await page.goto(f"{server.url}/ui/datasets/results/{query_id}")
        await expect(page.locator("table tbody tr")).to_have_count(4)

        # A query error is shown next to the form, which keeps the query.
        await page.goto(f"{server.url}/ui/datasets/query")
        await page.fill("input[name=files]", "sales")
        await _run_query(page, "SELECT nope FROM data", chart="")
        await expect(page.locator("[role=alert]")).to_contain_text("nope")
        await expect(page.locator("#sql")).to_have_value("SELECT nope FROM data")

        # A form posted without this session's token (a cross-site request) is refused; nothing is written.
        forged = await page.request.post(
            f"{server.url}/ui/datasets/export",
            form={"query_id": query_id, "format": "csv", "destination": "exports", "filename": "forged.csv"},
            headers={"Origin": server.url},
        )
        assert forged.status == 403 and "security token" in await forged.text()
        assert not (project_folder(server) / "exports" / "forged.csv").exists()


async def test_a_read_key_is_refused_the_export_and_downloads_stay_in_the_project(
    server: RunningServer, browser: Browser, sales: list[tuple[str, int, float, str]], rest: httpx.AsyncClient
) -> None:
    r = await rest.post("/api/v1/datasets/query", json={"query": BY_REGION, "files": ["sales"]})
    assert r.status_code == 200, r.text
    r = await rest.post(
        "/api/v1/datasets/export",
        json={"query_id": r.json()["query_id"], "format": "csv", "destination": "exports", "filename": "mine.csv"},
    )
    assert r.status_code == 200, r.text
    exported = r.json()["files_created"][0]
    assert exported == "exports/mine.csv"
    (project_folder(server) / "exports" / ".hidden.csv").write_text("a\n1\n")
    async with new_page(browser, PHONE) as page:
        await sign_in(page, server.url, READ_KEY, "/ui/datasets/query?file=sales")
        await _run_query(page, BY_REGION)
        await expect(page.locator("#query-result table tbody tr")).to_have_count(4)
        await expect(page.locator("#query-result")).to_contain_text("needs a key with the write scope")
        await shot(page, "datasets-query-phone")
        await page.click("#export-form button[type=submit]")
        await expect(page.locator("[role=alert]")).to_contain_text("4030")
        await shot(page, "datasets-export-refused")
        # Reading an export of its project is a read: allowed.
        response = await page.request.get(f"{server.url}/ui/datasets/download?path={quote(exported)}")
        assert response.status == 200 and (await response.body()).startswith(b"region,units")
        assert response.headers["content-disposition"].startswith("attachment")
        for path, code in (("exports/.hidden.csv", "4002"), ("exports/none.csv", "4002"), ("/etc/passwd", "4030")):
            await page.goto(f"{server.url}/ui/datasets/download?path={quote(path)}")
            await expect(page.locator("[role=alert]")).to_contain_text(code)
    async with new_page(browser) as page:
        # A key bound to another project cannot reach this project's folder, by any path.
        await sign_in(page, server.url, PROJECT_KEY, "/ui/datasets")
        await expect(page.locator("#datasets")).to_have_count(0)
        for url in (
            f"/ui/datasets/download?path={quote(str(project_folder(server) / exported))}",
            "/ui/datasets/download?path=" + quote("../default/exports/mine.csv"),
            f"/ui/datasets/download?path={quote(exported)}&project=default",
        ):
            await page.goto(server.url + url)
            await expect(page.locator("[role=alert]")).to_contain_text("4030")
