"""app/datasets/engine/databases.py: a pooled locked database is reused only in the state it was
opened in, a call's objects do not reach the next call, and the lockdown holds on every use."""

from __future__ import annotations

import os
import time
from pathlib import Path

import duckdb
import pytest

from app.core.errors import CairnError, Forbidden, QueryError, SchemaError, Timeout
from app.datasets.engine import databases, sources
from app.datasets.engine.databases import POOL, ConnectionPool, open_locked
from app.datasets.engine.watchdog import run_with_timeout
from tests.support.datasets import small_engine_config

SLOW = "SELECT count(*) FROM range(100000) a, range(100000) b WHERE hash(a.range + b.range) = 0"


@pytest.fixture
def cfg(tmp_path: Path) -> databases.EngineConfig:
    """An engine configuration of its own (so its own pool key) with one small CSV in its root."""
    return small_engine_config(tmp_path, memory_limit="256MB", timeout_s=30)


def source(cfg: databases.EngineConfig, name: str = "a") -> sources.Source:
    path = cfg.roots[0] / "a.csv"
    return sources.make_source(name, str(path), [path])


def views(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1").fetchall()]


def test_a_database_is_reused_and_a_calls_views_are_gone_for_the_next(cfg: databases.EngineConfig) -> None:
    opened = POOL.opened
    seen = databases.run_locked(cfg, [source(cfg), source(cfg, "data")], views)
    assert seen == ["a", "data"]
    assert databases.run_locked(cfg, [], views) == []
    with pytest.raises(SchemaError):
        databases.run_locked(cfg, [], lambda con: con.execute("SELECT * FROM a").fetchall())
    assert POOL.opened == opened + 1 and POOL.idle(cfg.lockdown()) == 1


def test_a_view_is_kept_for_the_next_call_and_made_again_when_its_file_changes(cfg: databases.EngineConfig) -> None:
    def oid_and_columns(con: duckdb.DuckDBPyConnection) -> tuple[object, list[str]]:
        oid = con.execute("SELECT view_oid FROM duckdb_views() WHERE view_name = 'a'").fetchone()
        rel = con.sql("SELECT * FROM a")
        assert oid is not None and rel is not None
        return oid[0], list(rel.columns)

    first = databases.run_locked(cfg, [source(cfg)], oid_and_columns)
    assert databases.run_locked(cfg, [source(cfg)], oid_and_columns) == first  # the same view, kept
    path = cfg.roots[0] / "a.csv"
    path.write_text(path.read_text().replace("x,y", "x,y2", 1) + "9,9\n")
    again = databases.run_locked(cfg, [source(cfg)], oid_and_columns)
    assert again[0] != first[0] and again[1] == ["x", "y2"]  # made again over the file as it is now


def held_tables(con: duckdb.DuckDBPyConnection) -> list[tuple[str, int]]:
    found = con.execute("SELECT table_name, table_oid FROM duckdb_tables() WHERE NOT temporary ORDER BY 1")
    return [(str(r[0]), int(r[1])) for r in found.fetchall()]


def test_a_small_csv_is_parsed_once_per_version_and_a_rewrite_stat_cannot_tell_is_parsed_again(
    cfg: databases.EngineConfig,
) -> None:
    def rows_and_tables(con: duckdb.DuckDBPyConnection) -> tuple[list[tuple[object, ...]], list[tuple[str, int]]]:
        return con.execute("SELECT * FROM a ORDER BY x").fetchall(), held_tables(con)

    opened = POOL.opened
    rows, tables = databases.run_locked(cfg, [source(cfg), source(cfg, "data")], rows_and_tables)
    assert rows == [(1, "one"), (2, "two"), (3, "three")]
    assert len(tables) == 1 and tables[0][0].startswith("_cairn_file_")  # both views read one table
    assert databases.run_locked(cfg, [source(cfg)], rows_and_tables) == (rows, tables)  # kept, not parsed again
    path = cfg.roots[0] / "a.csv"
    st = path.stat()
    path.write_text(path.read_text().replace("one", "uno"))  # the same size...
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # ...and the same modification time
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    rows, again = databases.run_locked(cfg, [source(cfg)], rows_and_tables)
    assert rows[0] == (1, "uno") and again != tables  # the digest told: parsed again
    assert databases.run_locked(cfg, [], held_tables) == []  # a call that reads no file finds none
    assert POOL.opened == opened + 1  # one database, given back with its tables after each call


def test_a_larger_or_unparsable_csv_is_read_by_each_query(
    cfg: databases.EngineConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(databases, "HELD_CSV_BYTES", 10)
    count = databases.run_locked(
        cfg, [source(cfg)], lambda con: (con.execute("SELECT count(*) FROM a").fetchone(), held_tables(con))
    )
    assert count == ((3,), [])
    monkeypatch.undo()
    bad = cfg.roots[0] / "bad.csv"
    bad.write_text("x,y\n" + "".join(f"{i},{i}\n" for i in range(30000)) + "oops,1\n")
    src = sources.make_source("b", str(bad), [bad])
    # Past the sniffer's sample a value does not fit its column: the table cannot be made, the view
    # reads the file, and the error is the query's, as for a larger file.
    with pytest.raises(CairnError):
        databases.run_locked(cfg, [src], lambda con: con.execute("SELECT sum(x) FROM b").fetchall())
    assert databases.run_locked(cfg, [src], lambda con: con.execute("SELECT count(y) FROM b").fetchone()) == (30001,)


def test_a_view_that_failed_to_change_is_not_left_for_the_next_call(cfg: databases.EngineConfig) -> None:
    databases.run_locked(cfg, [source(cfg)], lambda con: con.execute("SELECT count(*) FROM a").fetchall())
    missing = cfg.roots[0] / "gone.csv"
    with pytest.raises(CairnError):
        databases.run_locked(cfg, [sources.make_source("a", str(missing), [missing])], views)
    assert databases.run_locked(cfg, [], views) == []
    with pytest.raises(SchemaError):
        databases.run_locked(cfg, [], lambda con: con.execute("SELECT * FROM a").fetchall())


def test_connection_state_ends_with_the_call(cfg: databases.EngineConfig) -> None:
    def leave_state(con: duckdb.DuckDBPyConnection) -> None:
        con.execute("CREATE TEMP TABLE t AS SELECT 1 AS v")
        con.execute("CREATE TEMP VIEW tv AS SELECT 1 AS v")
        con.execute("PREPARE p AS SELECT 42")
        con.execute("SET VARIABLE secret = 'from the first call'")

    databases.run_locked(cfg, [], leave_state)
    opened = POOL.opened

    def look(con: duckdb.DuckDBPyConnection) -> tuple[int, object]:
        tables = con.execute("SELECT count(*) FROM duckdb_tables()").fetchone()
        variable = con.execute("SELECT getvariable('secret')").fetchone()
        assert tables is not None and variable is not None
        with pytest.raises(duckdb.Error):
            con.execute("EXECUTE p")
        return int(tables[0]), variable[0]

    assert databases.run_locked(cfg, [], look) == (0, None)
    assert databases.run_locked(cfg, [], views) == []
    assert POOL.opened == opened  # temporary state dies with the call's connection: the database was reused


def test_a_database_left_with_objects_is_discarded(cfg: databases.EngineConfig) -> None:
    databases.run_locked(cfg, [], lambda con: None)
    opened = POOL.opened
    # Calls cannot create tables (only SELECT/EXPLAIN pass check_sql); this stands for a reset that missed one.
    databases.run_locked(cfg, [], lambda con: con.execute("CREATE TABLE main.kept AS SELECT 1 AS v"))
    assert POOL.idle(cfg.lockdown()) == 0
    tables = databases.run_locked(cfg, [], lambda con: con.execute("SELECT count(*) FROM duckdb_tables()").fetchone())
    assert tables == (0,) and POOL.opened == opened + 1


def test_a_deferred_check_runs_before_the_next_lease_however_soon_it_comes(
    cfg: databases.EngineConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker process defers the check (`worker.serve` runs it once it has answered): a lease that comes
    # first runs it, and a leftover never reaches that call.
    monkeypatch.setattr(POOL, "defer_checks", True)
    databases.run_locked(cfg, [], lambda con: None)
    opened = POOL.opened
    databases.run_locked(cfg, [], lambda con: None)
    assert POOL.opened == opened  # checked as this call leased it, and reused
    databases.run_locked(cfg, [], lambda con: con.execute("CREATE TABLE main.kept AS SELECT 1 AS v"))
    tables = databases.run_locked(cfg, [], lambda con: con.execute("SELECT count(*) FROM duckdb_tables()").fetchone())
    assert tables == (0,) and POOL.opened == opened + 1  # the one left with a table was closed, unused
    databases.run_locked(cfg, [], lambda con: None)
    POOL.settle()  # what an idle worker does
    assert POOL.idle(cfg.lockdown()) == 1 and POOL.opened == opened + 1  # a clean one goes back


def test_a_timed_out_call_does_not_give_its_database_back(cfg: databases.EngineConfig) -> None:
    databases.run_locked(cfg, [], lambda con: None)
    assert POOL.idle(cfg.lockdown()) == 1
    short = databases.EngineConfig(**{**cfg.__dict__, "timeout_s": 0.2})
    started = time.monotonic()
    with pytest.raises(Timeout):
        databases.run_locked(short, [source(cfg)], lambda con: con.execute(SLOW).fetchall())
    assert time.monotonic() - started < 10
    assert POOL.idle(cfg.lockdown()) == 0  # the interrupted database was closed, not pooled
    opened = POOL.opened
    assert databases.run_locked(cfg, [], views) == []
    assert POOL.opened == opened + 1


def test_an_unexpected_failure_discards_the_database(cfg: databases.EngineConfig) -> None:
    databases.run_locked(cfg, [], lambda con: None)

    def fail(con: duckdb.DuckDBPyConnection) -> None:
        raise RuntimeError("not a statement error")

    with pytest.raises(RuntimeError):
        databases.run_locked(cfg, [source(cfg)], fail)
    assert POOL.idle(cfg.lockdown()) == 0


def test_a_statement_error_keeps_the_database(cfg: databases.EngineConfig) -> None:
    databases.run_locked(cfg, [], lambda con: None)
    opened = POOL.opened
    with pytest.raises(SchemaError, match="Did you mean 'x'"):
        databases.run_locked(cfg, [source(cfg)], lambda con: con.execute("SELECT xx FROM a").fetchall())
    assert POOL.idle(cfg.lockdown()) == 1 and POOL.opened == opened
    assert databases.run_locked(cfg, [], views) == []


def late(seconds: float) -> int:
    """Work that outlives the watchdog without running a DuckDB statement it could interrupt."""
    time.sleep(seconds)
    return 7


def test_a_watchdog_that_fires_after_the_work_returned_still_discards(cfg: databases.EngineConfig) -> None:
    db = open_locked(cfg.lockdown())
    try:
        con = db.cursor()
        assert run_with_timeout(con, 0.05, lambda: late(1.0)) == (7, True)  # a wide margin on a busy host
        con.close()
    finally:
        db.close()
    databases.run_locked(cfg, [], lambda con: None)
    short = databases.EngineConfig(**{**cfg.__dict__, "timeout_s": 0.05})
    assert databases.run_locked(short, [], lambda con: late(1.0)) == 7
    assert POOL.idle(cfg.lockdown()) == 0


def lockdown_checks(cfg: databases.EngineConfig, outside: Path) -> None:
    """Every way out the lock closes, tried on whichever database the pool hands out."""
    for statement in (
        "SET memory_limit = '8GB'",
        "SET threads = 8",
        "SET enable_external_access = true",
        "SET allowed_directories = ['/']",
        "SET lock_configuration = false",
        "SET autoload_known_extensions = true",
        "RESET enable_external_access",
    ):

        def change(con: duckdb.DuckDBPyConnection, statement: str = statement) -> None:
            con.execute(statement)

        with pytest.raises(QueryError, match="configuration has been locked"):
            databases.run_locked(cfg, [], change)
    with pytest.raises(Forbidden):
        databases.run_locked(cfg, [], lambda con: con.execute(f"SELECT * FROM read_csv_auto('{outside}')").fetchall())
    with pytest.raises(Forbidden):
        databases.run_locked(cfg, [], lambda con: con.execute(f"COPY (SELECT 1) TO '{outside}.out'"))
    settings = databases.run_locked(
        cfg,
        [],
        lambda con: con.execute(
            "SELECT current_setting('enable_external_access'), current_setting('lock_configuration'), "
            "current_setting('autoload_known_extensions'), current_setting('autoinstall_known_extensions'), "
            "current_setting('threads'), current_setting('allowed_directories')"
        ).fetchone(),
    )
    assert settings is not None
    assert settings[:5] == (False, True, False, False, 1)
    # DuckDB adds its spill directory to the allowed ones itself
    assert sorted(settings[5]) == sorted(str(p).rstrip("/") + "/" for p in [*cfg.allowed, cfg.work / "tmp"])
    caches = databases.run_locked(
        cfg,
        [],
        lambda con: con.execute(
            "SELECT name, value FROM duckdb_settings() "
            "WHERE name IN ('enable_external_file_cache', 'parquet_metadata_cache')"
        ).fetchall(),
    )
    assert all(value == "false" for _, value in caches)  # nothing read by one call is kept for the next


def test_the_lockdown_holds_on_a_reused_database(cfg: databases.EngineConfig, tmp_path: Path) -> None:
    outside = tmp_path / "outside.csv"
    outside.write_text("secret\n1\n")
    opened = POOL.opened
    lockdown_checks(cfg, outside)  # first use
    databases.run_locked(cfg, [source(cfg)], lambda con: con.execute("SELECT count(*) FROM a").fetchall())
    lockdown_checks(cfg, outside)  # second and later uses
    assert POOL.opened == opened + 1 and not outside.with_name("outside.csv.out").exists()


def test_a_database_with_another_database_attached_is_discarded(cfg: databases.EngineConfig) -> None:
    databases.run_locked(cfg, [], lambda con: None)
    opened = POOL.opened
    # check_sql refuses ATTACH; this stands for a statement that slipped past it.
    databases.run_locked(cfg, [], lambda con: con.execute("ATTACH ':memory:' AS other"))
    assert POOL.idle(cfg.lockdown()) == 0
    names = databases.run_locked(
        cfg, [], lambda con: con.execute("SELECT database_name FROM duckdb_databases()").fetchall()
    )
    assert ("other",) not in names and POOL.opened == opened + 1


def test_idle_databases_are_bounded_per_lockdown_and_in_lockdowns(cfg: databases.EngineConfig) -> None:
    pool = ConnectionPool(max_lockdowns=1)
    first = cfg.lockdown()
    leases = [pool.lease(first, keep=2) for _ in range(3)]
    for lease in leases:
        with lease:
            pass
    assert pool.idle(first) == 2 and pool.opened == 3
    other = cfg.lockdown(threads=2)
    with pool.lease(other, keep=2):
        pass
    assert pool.idle(first) == 0 and pool.idle(other) == 1
    pool.clear()
    assert pool.idle(other) == 0
