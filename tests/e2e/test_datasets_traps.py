"""The datasets family's small traps (issue 15), each over MCP and REST on the real server: compressed
exports whose names say what they hold and that read back, `execute_query` without a query_type,
`query_context` in query errors, cache entries named as the caller knows them, URLs refused as outside
the roots (4030), and the seed's pandas example on the python engine."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.datasets import Both, callers, exported, python_engine_on, root_of
from tests.support.server import RunningServer, mcp_client

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture
def values(server: RunningServer) -> Path:
    """A data root holding traps_values.csv: id, grp, value (12 rows)."""
    root = root_of(server)
    path = root / "traps_values.csv"
    path.write_text("id,grp,value\n" + "".join(f"{i},{'ab'[i % 2]},{i * 10}\n" for i in range(1, 13)))
    return root


def read_bytes(path: Path) -> bytes:
    return path.read_bytes()


async def both_ok(caller: Both, tool: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool's answer over MCP and over REST (each must succeed)."""
    answers = await caller.both(tool, args)
    for code, body in answers:
        assert code == 0, (tool, args, body)
    return [body for _, body in answers]


# ------------------------------------------------------------------------------------------------ 1. exports


async def test_compressed_exports_say_so_and_read_back(server: RunningServer, values: Path) -> None:
    async with callers(server) as (admin, _):
        stored = await admin.ok("execute_query", {"query": "SELECT * FROM traps_values", "files": ["traps_values.csv"]})
        base = {"query_id": stored["query_id"], "destination": "traps_exports", "overwrite": True}
        # gzip into a name without .gz: refused on both transports, saying how to make them agree.
        err = await admin.refused(
            "export_result", {**base, "format": "csv", "compression": "gzip", "filename": "dec.csv"}, 4001, ".csv.gz"
        )
        assert "Name it dec.csv.gz" in err["suggestions"]
        assert any("compression 'none'" in s for s in err["suggestions"])
        err = await admin.refused(
            "export_result", {**base, "format": "csv", "compression": "none", "filename": "dec.csv.gz"}, 4001, ".csv"
        )
        assert any("compression 'gzip'" in s for s in err["suggestions"])
        # Without a compression, the name's .gz / .zst chooses it, so the bytes match the name.
        written: dict[str, Path] = {}
        for fmt, filename, comp in [
            ("csv", "dec.csv.gz", None),
            ("csv", "dec.csv.zst", None),
            ("json", "dec.jsonl.gz", None),
            ("json", None, "zstd"),
            ("csv", None, "gzip"),
        ]:
            args: dict[str, Any] = {**base, "format": fmt}
            if filename:
                args["filename"] = filename
            if comp:
                args["compression"] = comp
            out = await admin.ok("export_result", args)
            path = exported(server, out["output_path"])
            assert out["output_path"] == f"traps_exports/{path.name}" == out["files_created"][0]
            written[path.name] = path
        assert set(written) == {
            "dec.csv.gz",
            "dec.csv.zst",
            "dec.jsonl.gz",
            f"{stored['query_id']}.json.zst",
            f"{stored['query_id']}.csv.gz",
        }
        assert gzip.decompress(read_bytes(written["dec.csv.gz"])).startswith(b"id,grp,value\n")
        assert read_bytes(written["dec.csv.zst"])[:4] == b"\x28\xb5\x2f\xfd"  # the zstd frame magic
        first = json.loads(gzip.decompress(read_bytes(written["dec.jsonl.gz"])).splitlines()[0])
        assert first == {"id": 1, "grp": "b", "value": 10}
        part = await admin.ok(
            "export_result",
            {**base, "overwrite": False, "format": "csv", "partition_by": "grp", "filename": "traps_by_grp.csv.gz"},
        )
        assert part["files_total"] == 2 and part["files_pattern"] == "traps_exports/traps_by_grp.csv.gz/grp=*/*.csv.gz"
        # Every one of them reads back: as `files`, in a read_csv_auto literal, by a glob, profiled and sampled.
        for name in written:
            for answer in await both_ok(
                admin,
                "execute_query",
                {"query": "SELECT count(*) AS n, sum(value) AS s FROM data", "files": [f"traps_exports/{name}"]},
            ):
                assert answer["data"] == [{"n": 12, "s": 780}], name
        literal = await admin.ok(
            "execute_query", {"query": "SELECT count(*) AS n FROM read_csv_auto('traps_exports/dec.csv.gz')"}
        )
        assert literal["data"] == [{"n": 12}]
        glob = await admin.ok(
            "execute_query",
            {"query": "SELECT count(*) AS n FROM data", "files": ["traps_exports/traps_by_grp.csv.gz/*/*.csv.gz"]},
        )
        assert glob["data"] == [{"n": 12}]
        for profile in await both_ok(admin, "profile_dataset", {"file_path": "traps_exports/dec.csv.gz"}):
            assert profile["statistics"]["row_count"] == 12 and profile["format"] == "csv"
        for sample in await both_ok(
            admin, "stream_sample", {"file_path": "traps_exports/dec.jsonl.gz", "strategy": "head", "sample_size": 3}
        ):
            assert [r["id"] for r in sample["sample"]] == [1, 2, 3]


# ------------------------------------------------------------------------------------------------ 2. query_type


async def test_execute_query_needs_no_query_type(server: RunningServer, values: Path) -> None:
    async with callers(server) as (admin, _):
        for answer in await both_ok(admin, "execute_query", {"query": "SELECT 42 AS answer"}):
            assert answer["data"] == [{"answer": 42}] and answer["summary"]["engine_used"] == "duckdb"
        chain = "pl.scan_csv('traps_values.csv').filter(pl.col('value') > 100).select(pl.col('id'))"
        for answer in await both_ok(admin, "execute_query", {"engine": "polars", "query": chain}):
            assert answer["data"] == [{"id": 11}, {"id": 12}]
            assert answer["summary"]["engine_used"] == "polars_expr→duckdb"
        # An explicit query_type still has to fit the engine.
        await admin.refused("execute_query", {"engine": "duckdb", "query_type": "polars_expr", "query": chain}, 4001)
    async with mcp_client(server.url) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        schema = tools["execute_query"].input_schema
        assert schema["required"] == ["query"]
        assert schema["properties"]["query_type"]["default"] == "sql"


# ------------------------------------------------------------------------------------------------ 3. query_context


async def test_query_errors_carry_query_context(server: RunningServer, values: Path) -> None:
    async with callers(server) as (admin, _):

        async def context(args: dict[str, Any], code: int) -> str:
            contexts: set[str] = set()
            for got, body in await admin.both("execute_query", args):
                assert got == code, (args, body)
                contexts.add(str(body["error"]["query_context"]))
            assert len(contexts) == 1, contexts  # the same on both transports
            return contexts.pop()

        files = ["traps_values.csv"]
        assert (
            await context({"query": "SELECT revenu FROM data", "files": files}, 4003) == "SELECT >>>revenu<<< FROM data"
        )
        assert await context({"query": "SELEC id\nFROM data", "files": files}, 4004) == ">>>SELEC<<< id FROM data"
        assert (
            await context({"query": "SELECT id FROM data WHERE grp = 'a' AND nope > 1", "files": files}, 4003)
            == "SELECT id FROM data WHERE grp = 'a' AND >>>nope<<< > 1"
        )
        assert await context({"query": "SELECT * FROM read_text('x.txt')"}, 4030) == (
            "SELECT * FROM >>>read_text<<<('x.txt')"
        )
        # No place to point at: the beginning of the query, on one line, bounded.
        long = "SELECT count(*) AS n\nFROM data\n" + " ".join(f"-- {i}" for i in range(100))
        head = await context({"query": long, "files": ["missing.csv"]}, 4002)
        assert head.startswith("SELECT count(*) AS n FROM data -- 0") and len(head) <= 160
        polars = "pl.scan_csv('traps_values.csv').explode('grp')"
        assert ">>>explode<<<" in await context({"engine": "polars", "query": polars}, 4004)
        # Errors of other tools have no query to point at.
        for code, body in await admin.both("profile_dataset", {"file_path": "missing.csv"}):
            assert code == 4002 and "query_context" not in body["error"]


# ------------------------------------------------------------------------------------------------ 4. keys_removed


async def test_cache_invalidate_names_what_it_dropped(server: RunningServer, values: Path) -> None:
    project = "traps-cache"
    async with callers(server) as (admin, _):
        labelled = await admin.ok(
            "execute_query",
            {"query": "SELECT grp, sum(value) AS s FROM data GROUP BY grp", "files": ["traps_values.csv"],
             "cache_key": "traps-by-grp", "project": project},
        )  # fmt: skip
        plain = await admin.ok(
            "execute_query",
            {"query": "SELECT   count(*) AS n\n  FROM data", "files": ["traps_values.csv"], "project": project},
        )
        await admin.ok("profile_dataset", {"file_path": "traps_values.csv", "project": project})
        # A query_id is a pattern too.
        one = await admin.ok("cache_invalidate", {"pattern": plain["query_id"], "project": project})
        assert one == {"invalidated_count": 1, "keys_removed": [f"{plain['query_id']} SELECT count(*) AS n FROM data"]}
        rest = await admin.ok("cache_invalidate", {"pattern": "*", "project": project})
        assert rest["invalidated_count"] == 2
        assert sorted(rest["keys_removed"]) == sorted(
            [f"{labelled['query_id']} traps-by-grp", "profile traps_values.csv"]
        )
        again = await admin.ok("execute_query", {**{"query": "SELECT 1 AS x"}, "project": project})
        for answer in await both_ok(admin, "cache_invalidate", {"pattern": "*", "project": project}):
            assert answer["keys_removed"] in ([f"{again['query_id']} SELECT 1 AS x"], [])


# ------------------------------------------------------------------------------------------------ 5. URLs


async def test_url_paths_are_outside_the_roots(server: RunningServer, values: Path) -> None:
    async with callers(server) as (admin, _):
        for url in ["https://example.com/a.csv", "s3://bucket/k.parquet", "file:///etc/passwd"]:
            calls: list[tuple[str, dict[str, Any]]] = [
                ("profile_dataset", {"file_path": url}),
                ("stream_sample", {"file_path": url}),
                ("execute_query", {"query": "SELECT 1", "files": [url]}),
                ("execute_query", {"query": f"SELECT * FROM '{url}'"}),
                ("register_dataset", {"name": "remote", "path": url}),
                ("cache_invalidate", {"file_path": url}),
            ]
            for tool, args in calls:
                err = await admin.refused(tool, args, 4030, "Remote URLs are not allowed")
                assert any("upload" in s for s in err["suggestions"])


# ------------------------------------------------------------------------------------------------ 6. pandas


@pytest.fixture
def python_engine(server: RunningServer) -> Iterator[None]:
    """The operator switch on for one test, with room for importing pandas."""
    yield from python_engine_on(server, cpu_seconds=20, memory_mb=1024)


# The seed's "Pandas Python query" example, quoted as the seed quotes it (indented), reading 'data.csv'.
SEED_EXAMPLE = """
    import pandas as pd
    from sklearn.preprocessing import StandardScaler

    df = pd.read_csv('data.csv')
    scaler = StandardScaler()
    df['normalized'] = scaler.fit_transform(df[['value']])
    result = df.describe()
  """
# The seed's example without scikit-learn: StandardScaler is (x - mean) / population std.
SEED_EXAMPLE_PANDAS_ONLY = """
    import pandas as pd

    df = pd.read_csv('data.csv')
    df['normalized'] = (df['value'] - df['value'].mean()) / df['value'].std(ddof=0)
    result = df.describe()
  """


def assert_described(answer: dict[str, Any]) -> None:
    """`df.describe()` of data.csv with its normalized column, as either example computes it."""
    assert answer["columns"] == ["index", "id", "value", "normalized"]
    stats = {row["index"]: row for row in answer["data"]}
    assert list(stats) == ["count", "mean", "std", "min", "25%", "50%", "75%", "max"]
    assert stats["count"]["value"] == 3 and stats["mean"]["value"] == 30
    assert abs(stats["mean"]["normalized"]) < 1e-9 and stats["max"]["normalized"] == pytest.approx(1.38873, 1e-4)
    assert answer["summary"]["engine_used"] == "python"


async def test_the_seed_pandas_example_runs(server: RunningServer, values: Path, python_engine: None) -> None:
    (values / "data.csv").write_text("id,value\n1,10\n2,20\n3,60\n")
    async with callers(server) as (admin, _):
        # The seed's example verbatim (scikit-learn comes with the `ml` extra), and without scikit-learn.
        for code in (SEED_EXAMPLE, SEED_EXAMPLE_PANDAS_ONLY):
            for answer in await both_ok(
                admin, "execute_query", {"engine": "pandas", "query_type": "python", "query": code}
            ):
                assert_described(answer)
        # engine pandas alone implies query_type python; a view of `files` reads as a DataFrame too.
        code = "df = con.sql('SELECT grp, value FROM data').df()\nresult = df.groupby('grp')['value'].sum()"
        for answer in await both_ok(
            admin, "execute_query", {"engine": "pandas", "query": code, "files": ["traps_values.csv"]}
        ):
            assert answer["data"] == [{"grp": "a", "value": 420}, {"grp": "b", "value": 360}]
        # A module the server does not have: a clear error pointing at its line (of the trimmed code).
        missing = SEED_EXAMPLE.replace("sklearn.preprocessing", "sklearn_not_installed.preprocessing")
        for got, body in await admin.both("execute_query", {"engine": "pandas", "query": missing}):
            assert got == 4004 and "No module named 'sklearn_not_installed'" in body["error"]["message"]
            assert body["error"]["query_context"] == (
                "line 2: from sklearn_not_installed.preprocessing import StandardScaler"
            )
