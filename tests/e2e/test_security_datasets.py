"""Regression tests of an attacker's findings against the datasets family, each over MCP and REST:
destructive exports, datasets shared across projects, 500s and wrong error codes, and SQL checks a
comment got past. Every refusal answers the shared error body and leaves the files and the registry
as they were."""

from __future__ import annotations

import errno
import gzip
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.datasets import service_common
from app.datasets.engine import exporting
from tests.support.datasets import Both, callers, exported, project_folder, root_of, tree
from tests.support.server import ADMIN_KEY, BOUND_PROJECT, RunningServer

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture
def shared(server: RunningServer) -> Path:
    """The operator's data root with one CSV."""
    root = root_of(server)
    (root / "cities.csv").write_text("city,pop\nOslo,700\nLima,9000\nPune,3000\n")
    return root


def read_bytes(path: Path) -> bytes:
    return path.read_bytes()


def read_text(path: Path) -> str:
    return path.read_text()


def write_text(path: Path, text: str) -> None:
    path.write_text(text)


def size_of(path: Path) -> int:
    return path.stat().st_size


def names_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def real(path: Path) -> Path:
    return path.resolve()


def run_time_path(path: Path) -> str:
    """SQL that builds `path` at run time (no literal looks like a path), so only DuckDB's lock stops it."""
    parts = [f"'{part}'".replace(".", "' || chr(46) || '") for part in str(path).split("/")[1:]]
    return "chr(47) || " + " || chr(47) || ".join(parts)


async def stored_result(who: Both, project: str | None = None) -> str:
    args: dict[str, Any] = {"query_type": "sql", "query": "SELECT * FROM data ORDER BY city", "files": ["cities.csv"]}
    if project:
        args["project"] = project
    return str((await who.ok("execute_query", args))["query_id"])


# ------------------------------------------------------------------------------------------------ 1. exports


async def test_exports_never_delete_or_replace_a_folder(server: RunningServer, shared: Path) -> None:
    async with callers(server) as (admin, _):
        qid = await stored_result(admin)
        folder = project_folder(server)
        (folder / "uploads").mkdir(parents=True, exist_ok=True)
        (folder / "uploads" / "keep.csv").write_text("a\n1\n")
        (folder / "exports" / "kept").mkdir(parents=True, exist_ok=True)
        (folder / "exports" / "kept" / "inside.csv").write_text("b\n2\n")
        before = tree(folder, shared)
        base = {"query_id": qid, "format": "csv", "compression": "none", "overwrite": True}
        # The finding: filename naming an existing folder with overwrite deleted the whole tree.
        await admin.refused("export_result", {**base, "destination": ".", "filename": "uploads"}, 4001, "must end in")
        await admin.refused(
            "export_result", {**base, "destination": ".", "filename": "uploads", "partition_by": "city"}, 4090, "folder"
        )
        await admin.refused(
            "export_result",
            {**base, "destination": "exports", "filename": "kept", "partition_by": "city"},
            4090,
            "folder",
        )
        (folder / "exports" / "dir.csv").mkdir()
        before = tree(folder, shared)
        await admin.refused("export_result", {**base, "destination": "exports", "filename": "dir.csv"}, 4090, "folder")
        # The upload route's folder and the shared roots are not export destinations.
        await admin.refused("export_result", {**base, "destination": "uploads", "filename": "keep.csv"}, 4030, "upload")
        await admin.refused("export_result", {**base, "destination": str(shared), "filename": "x.csv"}, 4030, "outside")
        await admin.refused("export_result", {**base, "destination": "../..", "filename": "x.csv"}, 4030, "outside")
        assert tree(folder, shared) == before  # nothing deleted, nothing written, no temporary file left


async def test_exports_write_only_their_own_format(server: RunningServer, shared: Path) -> None:
    async with callers(server) as (admin, _):
        qid = await stored_result(admin)
        folder = project_folder(server)
        base = {"query_id": qid, "destination": "exports"}
        before = tree(folder, shared)
        for args, needle in [
            ({"format": "csv", "filename": "upstreams.yaml"}, "must end in .csv"),
            ({"format": "csv", "filename": "keys.json"}, "must end in .csv"),
            ({"format": "csv", "filename": "dec.csv", "compression": "gzip"}, "must end in .csv.gz"),
            ({"format": "json", "filename": "d.json", "compression": "zstd"}, ".json.zst"),
            ({"format": "parquet", "filename": "p.csv"}, ".parquet"),
            ({"format": "xlsx", "filename": "x.xlsx", "compression": "gzip"}, "zip archives"),
            ({"format": "csv", "filename": "a.csv.gz", "compression": "none"}, "must end in .csv"),
        ]:
            await admin.refused("export_result", {**base, **args}, 4001, needle)
        assert tree(folder, shared) == before
        # gzip bytes land in a .gz file that reads back as the same rows.
        out = await admin.ok(
            "export_result", {**base, "format": "csv", "compression": "gzip", "filename": "dec.csv.gz"}
        )
        path = exported(server, out["output_path"])
        assert out["output_path"] == "exports/dec.csv.gz" and gzip.decompress(read_bytes(path)).startswith(
            b"city,pop\n"
        )
        back = await admin.ok(
            "execute_query",
            {"query_type": "sql", "query": "SELECT count(*) AS n FROM data", "files": ["exports/dec.csv.gz"]},
        )
        assert back["data"] == [{"n": 3}]
        js = await admin.ok("export_result", {**base, "format": "json", "compression": "none", "filename": "d.jsonl"})
        assert json.loads(read_text(exported(server, js["output_path"])).splitlines()[0]) == {
            "city": "Lima",
            "pop": 9000,
        }


async def test_exports_never_follow_a_symbolic_link(server: RunningServer, shared: Path, tmp_path: Path) -> None:
    async with callers(server) as (admin, _):
        qid = await stored_result(admin)
        folder = project_folder(server)
        (folder / "exports").mkdir(parents=True, exist_ok=True)
        outside = tmp_path / "outside"
        outside.mkdir()
        # A dangling link (XlsxWriter used to write through it), a link to a real file, a linked folder.
        (folder / "exports" / "evil.xlsx").symlink_to(outside / "evil.xlsx")
        (outside / "victim.csv").write_text("precious\n")
        (folder / "exports" / "victim.csv").symlink_to(outside / "victim.csv")
        (folder / "linked").symlink_to(outside, target_is_directory=True)
        before = tree(folder, shared, outside)
        base = {"query_id": qid, "destination": "exports", "overwrite": True}
        for overwrite in (False, True):
            args = {**base, "overwrite": overwrite}
            await admin.refused(
                "export_result", {**args, "format": "xlsx", "filename": "evil.xlsx"}, 4030, "symbolic link"
            )
            await admin.refused(
                "export_result", {**args, "format": "csv", "filename": "victim.csv"}, 4030, "symbolic link"
            )
        await admin.refused(
            "export_result",
            {**base, "destination": "linked", "format": "csv", "filename": "x.csv"},
            4030,
            "symbolic link",
        )
        await admin.refused(
            "export_result",
            {**base, "destination": "linked/deeper", "format": "csv", "filename": "x.csv"},
            4030,
            "link",
        )
        assert tree(folder, shared, outside) == before
        assert not (outside / "evil.xlsx").exists() and (outside / "victim.csv").read_text() == "precious\n"


async def test_overwrite_replaces_only_a_regular_file(server: RunningServer, shared: Path) -> None:
    async with callers(server) as (admin, _):
        qid = await stored_result(admin)
        base = {
            "query_id": qid,
            "destination": "exports/x",
            "format": "csv",
            "compression": "none",
            "filename": "r.csv",
        }
        first = await admin.ok("export_result", base)
        target = exported(server, first["output_path"])
        write_text(target, "old\n")
        await admin.refused("export_result", base, 4090, "already exists")
        assert read_text(target) == "old\n"
        again = await admin.ok("export_result", {**base, "overwrite": True})
        assert again["output_path"] == first["output_path"] == "exports/x/r.csv" and read_text(target).startswith(
            "city,pop\n"
        )
        assert names_in(target.parent) == ["r.csv"]  # no temporary file left
        part = await admin.ok(
            "export_result", {**base, "filename": "by_city", "partition_by": "city", "list_files": True}
        )
        assert part["files_total"] == 3 and all(f.startswith("exports/x/by_city/city=") for f in part["files_created"])


async def test_export_result_is_declared_destructive(server: RunningServer) -> None:
    async with callers(server) as (admin, _):
        tools = {t.name: t for t in (await admin.mcp.list_tools()).tools}
        hints = tools["export_result"].annotations
        assert hints is not None and hints.destructive_hint is True and hints.read_only_hint is False

    # ------------------------------------------------------------------------------------------------ 2. projects


async def test_datasets_are_scoped_to_the_callers_project(server: RunningServer, shared: Path) -> None:
    async with callers(server) as (admin, bound):
        beta = project_folder(server, "beta")
        # Project beta (an unbound key naming it) uploads, registers, queries.
        async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as c:
            up = await c.post(
                "/api/v1/datasets/upload",
                params={"project": "beta"},
                data={"name": "payroll"},
                files={"file": ("payroll.csv", b"who,salary\nann,100\nbob,200\n", "text/csv")},
            )
        assert up.status_code == 200, up.text
        # Recorded by its key in the store (never a host path); the local store keeps it in beta's folder.
        assert up.json()["dataset"]["path"] == "projects/beta/uploads/payroll.csv"
        beta_file = beta / "uploads" / "payroll.csv"
        assert beta_file.is_file()
        await admin.ok("register_dataset", {"name": "towns", "path": "cities.csv", "project": "beta"})
        beta_qid = await stored_result(admin, "beta")
        hit = {"query_type": "sql", "query": "SELECT sum(salary) AS s FROM payroll", "files": ["payroll"]}
        assert (await admin.ok("execute_query", {**hit, "project": "beta"}))["data"] == [{"s": 300}]
        before = tree(beta, shared)

        # A key bound to another project sees none of it, whatever it names.
        await bound.refused("execute_query", hit, 4002)
        await bound.refused("execute_query", {**hit, "project": "beta"}, 4030, "bound to project")
        await bound.refused("profile_dataset", {"file_path": str(beta_file)}, 4030, "outside")
        await bound.refused("profile_dataset", {"file_path": "projects/beta/uploads/payroll.csv"}, 4002)
        owned = {"file_path": "projects/beta/uploads/payroll.csv", "project": "beta"}
        # The path list_datasets shows names the file for its own project.
        assert (await admin.ok("profile_dataset", owned))["statistics"]["row_count"] == 2
        await bound.refused("stream_sample", {"file_path": "uploads/payroll.csv"}, 4002)
        await bound.refused(
            "execute_query",
            {"query_type": "sql", "query": f"SELECT * FROM read_csv_auto('{beta_file}')", "files": []},
            4030,
        )
        built = f"SELECT * FROM read_csv_auto({run_time_path(beta_file)})"
        await bound.refused("execute_query", {"query_type": "sql", "query": built, "files": []}, 4030, "sandbox")
        await bound.refused("get_result", {"query_id": beta_qid}, 4002)
        await bound.refused(
            "execute_query", {"query_type": "sql", "query": f"SELECT * FROM {beta_qid}", "files": []}, 4002
        )
        await bound.refused("execute_query", {"query_type": "sql", "query": "SELECT 1", "files": [beta_qid]}, 4002)
        await bound.refused("export_result", {"query_id": beta_qid, "destination": "exports"}, 4002)
        listed = await bound.ok("list_datasets", {})
        assert listed["project"] == BOUND_PROJECT and listed["datasets"] == []
        assert not any("payroll" in f["path"] for f in listed["files"]) and str(beta) not in listed["roots"]
        # Names are per project: the bound key's 'towns' and 'payroll' are its own; beta's stay as they were.
        mine = await bound.ok("register_dataset", {"name": "towns", "path": "cities.csv", "replace": True})
        assert mine["created"] is True
        (project_folder(server, BOUND_PROJECT) / "own.csv").write_text("who,salary\nzed,1\n")
        await bound.ok("register_dataset", {"name": "payroll", "path": "own.csv"})
        ours = await bound.ok("execute_query", hit)
        assert ours["data"] == [{"s": 1}]
        assert (await admin.ok("execute_query", {**hit, "project": "beta"}))["data"] == [{"s": 300}]
        # Dropping "every" cache entry drops only the caller's own.
        await bound.ok("cache_invalidate", {"pattern": "*"})
        again = await admin.ok("execute_query", {**hit, "project": "beta"})
        assert again["summary"]["cache_hit"] is True
        beta_list = await admin.ok("list_datasets", {"project": "beta"})
        assert [(d["name"], d["path"]) for d in beta_list["datasets"]] == [
            ("payroll", "projects/beta/uploads/payroll.csv"),
            ("towns", str(real(shared) / "cities.csv")),
        ]
        # The bound key's results and exports are its own too, and land in its folder.
        own_qid = await stored_result(bound)
        out = await bound.ok("export_result", {"query_id": own_qid, "destination": "exports", "format": "csv"})
        assert exported(server, out["output_path"], BOUND_PROJECT).is_file()
        await admin.refused("get_result", {"query_id": own_qid}, 4002)  # the default project's view
        assert (await admin.ok("get_result", {"query_id": own_qid, "project": BOUND_PROJECT}))["rows_total"] == 3
        assert tree(beta, shared) == before

    # ------------------------------------------------------------------------------------------------ 3. errors


async def test_a_path_outside_the_roots_names_the_upload_route(server: RunningServer, tmp_path: Path) -> None:
    """An MCP client cannot hand the server a file; the refusal says how to bring one (over MCP and REST)."""
    outside = tmp_path / "mine.csv"
    outside.write_text("a\n1\n")
    async with callers(server) as (admin, _):
        for got, body in await admin.both("register_dataset", {"name": "mine", "path": str(outside)}):
            assert got == 4030 and "outside the data roots" in body["error"]["message"], body
            upload = [s for s in body["error"]["suggestions"] if "POST /api/v1/datasets/upload" in s]
            assert upload and "registered under that name" in upload[0], body
        assert "mine" not in {d["name"] for d in (await admin.ok("list_datasets", {}))["datasets"]}


@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        ("pl.table('data').limit('x')", ".limit() takes a whole number"),
        ("pl.table('data').select(pl.col('pop').round('x'))", ".round() takes a whole number"),
        ("pl.table('data').select(pl.lit())", "pl.lit takes 1 argument"),
        ("pl.table('data').select(pl.col('pop').alias())", ".alias() takes 1 argument"),
        ("pl.table('data').filter(" + "~" * 3000 + "pl.col('pop'))", "nests deeper"),
    ],
)
async def test_malformed_polars_expr_is_invalid_input(
    server: RunningServer, shared: Path, expr: str, needle: str
) -> None:
    async with callers(server) as (admin, _):
        await admin.refused(
            "execute_query", {"query_type": "polars_expr", "query": expr, "files": ["cities.csv"]}, 4001, needle
        )


async def test_filesystem_errors_are_not_database_outages(
    server: RunningServer, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with callers(server) as (admin, _):
        qid = await stored_result(admin)
        folder = project_folder(server)
        (folder / "afile.csv").write_text("x\n")
        base = {"query_id": qid, "format": "csv", "compression": "none"}
        await admin.refused("export_result", {**base, "destination": "afile.csv/sub"}, 4001, "is a file")

        def failing(code: int) -> Any:
            def copy(*_: Any) -> None:
                raise OSError(code, os.strerror(code))

            return copy

        for code, expect, needle in [
            (errno.EACCES, 4030, "may not write"),
            (errno.EROFS, 4030, "may not write"),
            (errno.ENOSPC, 5001, "disk is full"),
            (errno.ENOTDIR, 4001, "cannot write"),
        ]:
            monkeypatch.setattr(exporting, "_copy", failing(code))
            await admin.refused("export_result", {**base, "destination": "exports"}, expect, needle)
        monkeypatch.undo()

        def no_space(*_: Any) -> None:
            raise PermissionError(errno.EACCES, "Permission denied")

        monkeypatch.setattr(service_common, "make_space", no_space)
        service_common._SPACES.clear()  # spaces made in the last seconds are remembered
        await admin.refused("profile_dataset", {"file_path": "cities.csv"}, 4030, "may not write")
        monkeypatch.undo()
        assert not list((folder / "exports").glob(".export-*"))


async def test_timestamptz_columns_work_end_to_end(server: RunningServer, shared: Path) -> None:
    async with callers(server) as (admin, _):
        (shared / "events.csv").write_text(
            "ts,kind\n2025-01-01T10:00:00Z,a\n2025-01-01T12:30:00Z,b\n2025-01-02T00:00:00Z,a\n"
        )
        prof = await admin.ok("profile_dataset", {"file_path": "events.csv", "detail": "full"})
        ts = {c["name"]: c for c in prof["schema"]["columns"]}["ts"]
        assert ts["type"] == "datetime" and "TIME ZONE" in ts["duckdb_type"]
        q = await admin.ok(
            "execute_query",
            {
                "query_type": "sql",
                "query": "SELECT ts, kind, now() AS now FROM data ORDER BY ts",
                "files": ["events.csv"],
            },
        )
        assert q["rows_total"] == 3 and q["data"][0]["ts"].startswith("2025-01-01") and q["data"][0]["now"]
        assert (await admin.ok("get_result", {"query_id": q["query_id"]}))["rows_total"] == 3
        for mode in ("summary", "csv"):
            await admin.ok(
                "execute_query",
                {"query_type": "sql", "query": "SELECT now() AS t", "files": [], "return_format": mode},
            )
        sample = await admin.ok("stream_sample", {"file_path": "events.csv", "strategy": "random", "sample_size": 2})
        assert len(sample["sample"]) == 2 and all(r["ts"].startswith("2025-01") for r in sample["sample"])
        for fmt in ("csv", "parquet", "json", "xlsx"):
            out = await admin.ok(
                "export_result", {"query_id": q["query_id"], "destination": "tz", "format": fmt, "compression": "none"}
            )
            assert size_of(exported(server, out["output_path"])) > 0

    # ------------------------------------------------------------------------------------------------ 5. SQL


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_text/**/('/etc/passwd')",
        "SELECT * FROM read_text -- x\n ('/etc/passwd')",
        "SELECT * FROM read_blob /* a */ /* b */ ('cities.csv')",
        "SELECT current_setting('temp_directory') AS t",
        "SELECT ('temp_directory').current_setting() AS t",
        "SELECT * FROM duckdb_settings()",
        "SELECT * FROM main.duckdb_settings/**/()",
        "SELECT * FROM duckdb_extensions()",
        "SELECT * FROM duckdb_temporary_files()",
        "SELECT * FROM duckdb_secrets()",
        "SELECT * FROM duckdb_logs()",
        "SELECT * FROM pragma_version()",
        "SELECT * FROM pragma_platform()",
        "SELECT * FROM which_secret('s3://x', 's3')",
        "SELECT * FROM json_execute_serialized_sql('{}')",
        "SHOW temp_directory",
        "FROM (SHOW allowed_directories)",
        'SELECT * FROM "DUCKDB_SETTINGS"()',
    ],
)
async def test_config_revealing_and_commented_functions_are_refused(
    server: RunningServer, shared: Path, sql: str
) -> None:
    async with callers(server) as (admin, _):
        await admin.refused(
            "execute_query", {"query_type": "sql", "query": sql, "files": ["cities.csv"]}, 4030, "not allowed"
        )
