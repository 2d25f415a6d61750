"""Reused DuckDB databases behind the datasets tools, through the real server: one call's views are not
there for the next, the sandbox refuses the same escapes on a reused database, a timed-out call leaves
nothing behind, and a query answers from a stored result a later get_result pages through."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from app.datasets.engine.pool import existing_pool
from tests.support.datasets import root_of
from tests.support.server import RunningServer, error_of, mcp_client

pytestmark = pytest.mark.asyncio(loop_scope="session")
VIEWS = "SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1"


def databases_opened() -> int:
    """Locked databases the DuckDB worker processes have opened so far."""
    pool = existing_pool()
    assert pool is not None
    return pool.databases_opened()


@pytest.fixture
def files(server: RunningServer) -> Path:
    """Two small CSVs in the server's data root."""
    root = root_of(server)
    (root / "pool_left.csv").write_text("id,city\n1,Oslo\n2,Lima\n3,Pune\n")
    (root / "pool_right.csv").write_text("id;score\n1;0.5\n2;0.25\n")
    return root


async def query(rest: httpx.AsyncClient, sql: str, files: list[str], status: int = 200, **extra: Any) -> Any:
    r = await rest.post("/api/v1/datasets/query", json={"query_type": "sql", "query": sql, "files": files, **extra})
    assert r.status_code == status, r.text
    return r.json()


async def test_views_do_not_outlive_their_call(rest: httpx.AsyncClient, files: Path) -> None:
    first = await query(rest, f"{VIEWS} -- left", ["pool_left.csv"])
    assert [r["view_name"] for r in first["data"]] == ["data", "pool_left"]
    second = await query(rest, f"{VIEWS} -- right", ["pool_right.csv"])
    assert [r["view_name"] for r in second["data"]] == ["data", "pool_right"]
    none = await query(rest, f"{VIEWS} -- none", [])
    assert none["data"] == []
    err = (await query(rest, "SELECT * FROM pool_left", ["pool_right.csv"], 400))["error"]
    assert err["code"] == 4003 and "pool_left" in err["message"]
    both = await query(
        rest,
        "SELECT l.city, r.score FROM pool_left l JOIN pool_right r USING (id) ORDER BY id",
        [
            "pool_left.csv",
            "pool_right.csv",
        ],
    )
    assert both["data"] == [{"city": "Oslo", "score": 0.5}, {"city": "Lima", "score": 0.25}]


async def test_the_sandbox_holds_on_reused_databases(
    server: RunningServer, rest: httpx.AsyncClient, files: Path
) -> None:
    await query(rest, "SELECT count(*) AS n FROM data -- warm", ["pool_left.csv"])
    opened = databases_opened()
    for round_ in range(3):
        ok = await query(rest, f"SELECT count(*) AS n, {round_} AS round FROM data", ["pool_left.csv"])
        assert ok["data"] == [{"n": 3, "round": round_}]
        # Built at run time, so only the lock of the (reused) database can stop it.
        e = (
            await query(
                rest,
                f"SELECT * FROM read_csv_auto(chr(47) || 'etc' || chr(47) || 'passwd') -- {round_}",
                [],
                403,
            )
        )["error"]
        assert e["code"] == 4030 and "sandbox" in e["message"]
        for q in [
            "SET enable_external_access = true",
            "ATTACH 'x.duckdb'",
            "CREATE TABLE t AS SELECT 1",
            f"SELECT current_setting('lock_configuration') AS locked -- {round_}",
        ]:
            assert (await query(rest, q, [], 403))["error"]["code"] == 4030
    assert databases_opened() == opened  # every call above ran on a database that was already open


async def test_a_timed_out_call_leaves_nothing_behind(
    server: RunningServer, rest: httpx.AsyncClient, files: Path
) -> None:
    slow = "SELECT count(*) FROM range(100000) a, range(100000) b WHERE hash(a.range + b.range) = 0"
    err = (await query(rest, slow, ["pool_left.csv"], 504, timeout_ms=300))["error"]
    assert err["code"] == 5003
    after = await query(rest, f"{VIEWS} -- after the timeout", [])
    assert after["data"] == []
    again = await query(rest, "SELECT count(*) AS n FROM data -- after the timeout", ["pool_left.csv"])
    assert again["data"] == [{"n": 3}]


async def test_the_answer_and_the_stored_result_agree(
    server: RunningServer, rest: httpx.AsyncClient, files: Path
) -> None:
    out = await query(rest, "SELECT id, city FROM data ORDER BY id", ["pool_left.csv"], return_limit=2)
    assert out["data"] == [{"id": 1, "city": "Oslo"}, {"id": 2, "city": "Lima"}]
    assert out["rows_total"] == 3 and out["next_offset"] == 2
    page = await rest.get(f"/api/v1/datasets/results/{out['query_id']}", params={"offset": 0, "limit": 3})
    assert page.status_code == 200 and page.json()["rows"][:2] == out["data"]
    async with mcp_client(server.url) as mcp:
        res = await mcp.call_tool(
            "execute_query", {"query_type": "sql", "query": f"SELECT * FROM {out['query_id']}", "files": []}
        )
        assert not res.is_error, res.content
        assert res.structured_content is not None and res.structured_content["rows_total"] == 3
        bad = await mcp.call_tool("execute_query", {"query_type": "sql", "query": "SET threads = 8", "files": []})
        assert error_of(bad)["code"] == 4030


async def test_a_query_over_small_files_runs_on_one_duckdb_thread(rest: httpx.AsyncClient, files: Path) -> None:
    from app.datasets.config import get_dataset_settings
    from app.datasets.service_query import SMALL_INPUT_BYTES

    pool = existing_pool()
    assert pool is not None

    def latest_threads() -> int:
        return list(pool._recent.values())[-1].threads

    await query(rest, "SELECT count(*) AS n FROM data -- small", ["pool_left.csv"])
    assert latest_threads() == 1
    big = files / "pool_big.csv"
    line = "x" * 1000 + "\n"
    big.write_text("v\n" + line * (SMALL_INPUT_BYTES // len(line) + 1))
    counted = await query(rest, "SELECT count(*) AS n FROM data -- big", ["pool_big.csv"])
    assert counted["data"] == [{"n": SMALL_INPUT_BYTES // len(line) + 1}]
    assert latest_threads() == get_dataset_settings().datasets_threads
