"""The seed's cache_manager and context_optimizer roles, over MCP and REST on the real server: what the
result cache holds for a project (entries named as the caller knows them, with sizes, ages, hits and
rows; paged; filtered; emptied by cache_invalidate), and what an execute_query reply would cost before
it runs (rows counted or planned, tokens against the budget), checked against the reply itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.datasets import engine
from tests.support.datasets import Both, callers, root_of
from tests.support.server import RunningServer

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.slow]

PROJECT = "cache-vis"
FILES = ["cache_orders.csv"]


@pytest.fixture
def orders(server: RunningServer) -> Path:
    """A data root holding cache_orders.csv: id, region (4 values), amount, note (300 rows)."""
    root = root_of(server)
    path = root / "cache_orders.csv"
    regions = ["north", "south", "east", "west"]
    path.write_text(
        "id,region,amount,note\n"
        + "".join(f"{i},{regions[i % 4]},{i * 3.5},order number {i} of the test\n" for i in range(1, 301))
    )
    return root


async def both_ok(caller: Both, tool: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool's answer over MCP and over REST (each must succeed)."""
    answers = await caller.both(tool, args)
    for code, body in answers:
        assert code == 0, (tool, args, body)
    return [body for _, body in answers]


async def test_cache_manager_lists_what_is_cached(server: RunningServer, orders: Path) -> None:
    async with callers(server) as (admin, _):
        await admin.ok("cache_invalidate", {"pattern": "*", "project": PROJECT})
        by_region = {
            "query": "SELECT region, sum(amount) AS total FROM data GROUP BY region ORDER BY region",
            "files": FILES, "cache_key": "by-region", "project": PROJECT,
        }  # fmt: skip
        labelled = await admin.ok("execute_query", by_region)
        plain = await admin.ok("execute_query", {"query": "SELECT * FROM data", "files": FILES, "project": PROJECT})
        await admin.ok("profile_dataset", {"file_path": "cache_orders.csv", "project": PROJECT})
        again = await admin.ok("execute_query", by_region)
        assert again["summary"]["cache_hit"] and again["query_id"] == labelled["query_id"]
        # Pricing the call finds the entry but answers nothing from it: no hit.
        priced = {k: v for k, v in by_region.items() if k != "cache_key"}
        assert (await admin.ok("context_optimizer", priced))["cache_hit"]
        for listing in await both_ok(admin, "cache_manager", {"project": PROJECT}):
            assert listing["project"] == PROJECT and listing["entries_total"] == 3
            named = {e["name"]: e for e in listing["entries"]}
            assert set(named) == {
                f"{labelled['query_id']} by-region",
                f"{plain['query_id']} SELECT * FROM data",
                "profile cache_orders.csv",
            }
            grouped = named[f"{labelled['query_id']} by-region"]
            assert grouped["kind"] == "query" and grouped["rows"] == 4 and grouped["hits"] == 1
            assert named[f"{plain['query_id']} SELECT * FROM data"]["rows"] == 300
            profile = named["profile cache_orders.csv"]
            assert profile["kind"] == "profile" and "rows" not in profile and profile["hits"] == 0
            # The whole table's stored result weighs more than the four groups'.
            assert named[f"{plain['query_id']} SELECT * FROM data"]["bytes"] > grouped["bytes"] > 0
            for e in listing["entries"]:
                assert 0 <= e["age_s"] <= 60 and 0 < e["expires_in_s"] <= listing["ttl_s"]
            assert listing["bytes_total"] == sum(e["bytes"] for e in listing["entries"])
            assert listing["next_offset"] is None and listing["context_tokens_used"] > 0
            assert listing["entries"][0]["name"] == "profile cache_orders.csv"  # newest first
        page = await admin.ok("cache_manager", {"project": PROJECT, "limit": 2})
        assert len(page["entries"]) == 2 and page["next_offset"] == 2 and page["entries_total"] == 3
        rest = await admin.ok("cache_manager", {"project": PROJECT, "limit": 2, "offset": 2})
        assert len(rest["entries"]) == 1 and rest["next_offset"] is None
        only = await admin.ok("cache_manager", {"project": PROJECT, "pattern": "by-*"})
        assert [e["name"] for e in only["entries"]] == [f"{labelled['query_id']} by-region"]
        # Another project sees none of them.
        other = await admin.ok("cache_manager", {"project": "cache-vis-other"})
        assert not any(labelled["query_id"] in e["name"] for e in other["entries"])
        await admin.ok("cache_invalidate", {"pattern": "*", "project": PROJECT})
        for listing in await both_ok(admin, "cache_manager", {"project": PROJECT}):
            assert listing["entries"] == [] and listing["entries_total"] == 0 and listing["bytes_total"] == 0


async def test_a_repeated_query_is_answered_from_its_cache_entry(
    server: RunningServer, orders: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first rows of a light result ride in its cache entry: asked again, the answer shows them
    without a DuckDB worker reading them back from the stored file. An answer that shows more rows
    than the entry holds reads them from the file, as does the next page."""
    reads: list[tuple[Any, ...]] = []
    real = engine.offload

    async def counted(fn: Any, cfg: Any, *args: Any, **kwargs: Any) -> Any:
        if fn is engine.read_rows:
            reads.append(args)
        return await real(fn, cfg, *args, **kwargs)

    monkeypatch.setattr(engine, "offload", counted)
    grouped = {
        "query": "SELECT region, count(*) AS n, sum(amount) AS total FROM data GROUP BY region ORDER BY region",
        "files": FILES, "project": PROJECT,
    }  # fmt: skip
    listed = {"query": "SELECT id, note FROM data ORDER BY id", "files": FILES, "project": PROJECT, "return_limit": 5}
    async with callers(server) as (admin, _):
        await admin.ok("cache_invalidate", {"pattern": "*", "project": PROJECT})
        first = await admin.ok("execute_query", grouped)
        assert not first["summary"]["cache_hit"] and len(first["data"]) == 4
        for again in await both_ok(admin, "execute_query", grouped):
            assert again["summary"]["cache_hit"] and again["query_id"] == first["query_id"]
            assert again["data"] == first["data"] and again["columns"] == first["columns"]
        assert reads == []
        five = await admin.ok("execute_query", listed)
        assert [r["id"] for r in (await admin.ok("execute_query", listed))["data"]] == [1, 2, 3, 4, 5]
        assert reads == []
        # Seven shown, five held: the seven come from the stored file.
        seven = await admin.ok("execute_query", {**listed, "return_limit": 7})
        assert seven["query_id"] == five["query_id"] and [r["id"] for r in seven["data"]] == list(range(1, 8))
        assert len(reads) == 1


async def test_context_optimizer_prices_a_reply_before_it_runs(server: RunningServer, orders: Path) -> None:
    async with callers(server) as (admin, _):
        await admin.ok("cache_invalidate", {"pattern": "*", "project": PROJECT})
        args = {"query": "SELECT * FROM data", "files": FILES, "return_limit": 20, "project": PROJECT}
        for est in await both_ok(admin, "context_optimizer", args):
            assert est["columns"] == ["id", "region", "amount", "note"] and est["column_count"] == 4
            assert est["rows_total"] == 300 and est["rows_exact"] and est["rows_returned"] == 20
            assert not est["cache_hit"] and est["fits"] and est["rows_within_budget"] == 20
            assert est["budget"] == 2000 and "advice" not in est and est["tokens_per_row"] > 5
        # Nothing was stored: the estimate is no query.
        assert (await admin.ok("cache_manager", {"project": PROJECT}))["entries_total"] == 0
        actual = await admin.ok("execute_query", args)
        assert not actual["truncated"] or actual["rows_returned"] == 20
        assert abs(est["estimated_tokens"] - actual["context_tokens_used"]) <= 6, (est, actual["context_tokens_used"])
        cached = await admin.ok("context_optimizer", args)
        assert cached["cache_hit"] and cached["basis"] == "cached result: exact"
        assert abs(cached["estimated_tokens"] - actual["context_tokens_used"]) <= 2  # its own query_id
        # A budget too small for the rows: how many fit, and what would fit them all.
        tight = {**args, "return_limit": 100, "max_tokens": 400}
        for est in await both_ok(admin, "context_optimizer", tight):
            assert not est["fits"] and est["budget"] == 400 and 0 < est["rows_within_budget"] < 100
            assert est["estimated_tokens"] > 400 and f"max_tokens {est['estimated_tokens']}" in est["advice"]
        cut = await admin.ok("execute_query", tight)
        assert cut["truncated"] and cut["rows_returned"] <= est["rows_within_budget"]
        # csv rows cost fewer tokens than json objects.
        csv = await admin.ok("context_optimizer", {**args, "return_format": "csv"})
        assert csv["tokens_per_row"] < est["tokens_per_row"]


async def test_context_optimizer_estimates_what_it_cannot_count_in_time(server: RunningServer, orders: Path) -> None:
    async with callers(server) as (admin, _):
        huge = {"query": "SELECT a.range AS x, b.range AS y FROM range(1000000) a, range(1000000) b"}
        for est in await both_ok(admin, "context_optimizer", {**huge, "project": PROJECT}):
            assert not est["rows_exact"] and est["rows_total"] >= 10**9, est
            assert est["rows_returned"] == 100 and "planner estimate" in est["basis"]
        grouped = "pl.scan_csv('cache_orders.csv').group_by('region').agg(pl.col('amount').sum())"
        for est in await both_ok(admin, "context_optimizer", {"query": grouped, "query_type": "polars_expr"}):
            assert est["rows_total"] == 4 and est["rows_exact"] and est["fits"]
        for est in await both_ok(admin, "context_optimizer", {"query": "DESCRIBE data", "files": FILES}):
            assert est["rows_total"] == 4 and est["rows_exact"]


async def test_context_optimizer_errors_are_execute_querys(server: RunningServer, orders: Path) -> None:
    async with callers(server) as (admin, _):
        err = await admin.refused("context_optimizer", {"query": "SELECT revenu FROM data", "files": FILES}, 4003)
        assert err["query_context"] == "SELECT >>>revenu<<< FROM data"
        await admin.refused("context_optimizer", {"query": "SELECT 1", "files": ["nope.csv"]}, 4002)
        await admin.refused("context_optimizer", {"query": "SELECT * FROM read_text('x.txt')"}, 4030)
        await admin.refused("context_optimizer", {"query": "x = 1", "query_type": "python"}, 4001)
