"""Two `cairn serve` hosts (separate data dirs) on one database and one S3 store (`rclone serve s3`):
what one host stores, the other reads; what one invalidates, the other recomputes."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.hosts import Fleet
from tests.support.objectstore import S3Server
from tests.support.server import ADMIN_KEY, STATIC_KEYS, PgCluster
from tests.support.waiting import eventually_sync

pytestmark = pytest.mark.slow  # two server processes and an S3 server

AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
CSV = b"city,temp\nOslo,3\nLima,19\nPerth,24\nQuito,14\n"
SQL = "SELECT city, temp FROM weather WHERE temp > 10 ORDER BY temp"


def post(api: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{api}{path}", json=body, headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text
    return dict(r.json())


def query(api: str, sql: str = SQL) -> dict[str, Any]:
    return post(api, "/datasets/query", {"query_type": "sql", "files": ["weather"], "query": sql})


def query_entries(s3: S3Server) -> list[str]:
    """The query cache entries in the bucket (an object being written has another name)."""
    return [k for k in s3.objects("cairn/cache/query_") if k.endswith(".json")]


@pytest.fixture
def s3() -> Any:
    server = S3Server.start(Path(tempfile.mkdtemp(prefix="cairn-s3-")) / "store")
    try:
        yield server
    finally:
        server.stop()


def test_a_fleet_shares_datasets_results_exports_and_invalidation(pg: PgCluster, s3: S3Server) -> None:
    env = {"CAIRN_DATABASE_URL": pg.handle.url(pg.new_database()), "CAIRN_API_KEYS": ",".join(STATIC_KEYS)}
    with Fleet() as fleet:
        a, b = (fleet.start({**env, **s3.env()}) for _ in range(2))
        up = httpx.post(
            f"{a.api}/datasets/upload",
            data={"name": "weather"},
            files={"file": ("weather.csv", CSV, "text/csv")},
            headers=AUTH,
            timeout=60,
        )
        assert up.status_code == 200, up.text
        # The registry holds the object's key, never a host path; the object is in the bucket.
        assert up.json()["dataset"]["path"] == "projects/default/uploads/weather.csv"
        assert "cairn/projects/default/uploads/weather.csv" in s3.objects()

        prof = post(b.api, "/datasets/profile", {"file_path": "weather"})
        assert prof["statistics"]["row_count"] == 4
        first = query(b.api)
        assert [r["city"] for r in first["data"]] == ["Quito", "Lima", "Perth"]
        assert first["summary"]["cache_hit"] is False

        # A's stored result, read, exported and queried through B.
        mine = query(a.api, SQL + " DESC")
        qid = mine["query_id"]
        # A small result is answered before its file is written: it reaches the store just after.
        eventually_sync(lambda: f"cairn/results/default/{qid}.parquet" in s3.objects(), what="A's result stored")
        page = httpx.get(f"{b.api}/datasets/results/{qid}", headers=AUTH, timeout=60)
        assert page.status_code == 200, page.text
        assert [r["city"] for r in page.json()["rows"]] == ["Perth", "Lima", "Quito"]
        out = post(b.api, "/datasets/export", {"query_id": qid, "destination": "exports", "format": "csv"})
        assert out["row_count"] == 3 and out["output_path"] == f"exports/{qid}.csv"
        assert f"cairn/projects/default/exports/{qid}.csv" in s3.objects()
        reused = post(
            b.api,
            "/datasets/query",
            {"query_type": "sql", "files": [qid], "query": f"SELECT sum(temp) AS t FROM {qid}"},
        )
        assert reused["data"] == [{"t": 57}]
        # A lists and reads the file B exported (its own folder lacks it: the store has it).
        listed = httpx.get(f"{a.api}/datasets", headers=AUTH, timeout=60).json()
        assert {f"exports/{qid}.csv", "uploads/weather.csv"} <= {f["path"] for f in listed["files"]}
        back = post(
            a.api,
            "/datasets/query",
            {"query_type": "sql", "files": [out["output_path"]], "query": "SELECT count(*) AS n FROM data"},
        )
        assert back["data"] == [{"n": 3}]

        # Every cache entry written (they follow the answers): none lands after the invalidation below.
        eventually_sync(lambda: len(query_entries(s3)) == 4, what="four query cache entries")
        # B answers its repeated query from the cache, A too (the entry is shared); after A invalidates,
        # B recomputes.
        assert query(b.api)["summary"]["cache_hit"] and query(a.api)["summary"]["cache_hit"]
        dropped = post(a.api, "/datasets/cache/invalidate", {"pattern": "*"})
        assert dropped["invalidated_count"] >= 1
        again = query(b.api)
        assert again["summary"]["cache_hit"] is False
        assert [r["city"] for r in again["data"]] == ["Quito", "Lima", "Perth"]
        assert post(b.api, "/datasets/profile", {"file_path": "weather"})["cache_hit"] is False

        # A replaced upload is read again by the other host (its local copy is keyed by version).
        rep = httpx.post(
            f"{a.api}/datasets/upload",
            data={"name": "weather", "replace": "true"},
            files={"file": ("weather.csv", b"city,temp\nRome,15\n", "text/csv")},
            headers=AUTH,
            timeout=60,
        )
        assert rep.status_code == 200, rep.text
        now = query(b.api)
        assert now["data"] == [{"city": "Rome", "temp": 15}] and now["summary"]["cache_hit"] is False
