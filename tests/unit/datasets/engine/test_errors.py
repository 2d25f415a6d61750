"""app/datasets/engine/errors.py: DuckDB's exceptions as the caller's errors, with suggestions and the
place in the statement they point at."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from app.core.errors import CairnError, Forbidden, InvalidInput, NotFound, QueryError, SchemaError, Timeout
from app.datasets.engine.databases import Lockdown, open_locked
from app.datasets.engine.errors import translate, without_paths
from app.datasets.engine.watchdog import TimedOut


@pytest.fixture
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    """A plain DuckDB with one table `people(name, age)`."""
    db = duckdb.connect(":memory:")
    db.execute("CREATE TABLE people AS SELECT 'ann' AS name, 31 AS age")
    yield db
    db.close()


def raised(con: duckdb.DuckDBPyConnection, sql: str) -> duckdb.Error:
    """The DuckDB exception `sql` raises."""
    with pytest.raises(duckdb.Error) as caught:
        con.execute(sql).fetchall()
    return caught.value


def test_a_missing_column_names_the_closest_known_one(con: duckdb.DuckDBPyConnection) -> None:
    err = translate(raised(con, "SELECT nmae FROM people"), ["name", "age"])
    assert isinstance(err, SchemaError) and err.code == 4003
    assert err.message == "Column 'nmae' not found. Did you mean 'name'?"
    assert "Known columns include: name" in err.suggestions
    assert err.query_context is not None and ">>>nmae<<<" in err.query_context


def test_statement_errors_keep_their_kind(con: duckdb.DuckDBPyConnection) -> None:
    syntax = translate(raised(con, "SELEC 1"))
    assert isinstance(syntax, QueryError) and syntax.message.startswith("Syntax error:")
    missing = translate(raised(con, "SELECT * FROM nowhere"))
    assert isinstance(missing, SchemaError) and "nowhere" in missing.message
    conversion = translate(raised(con, "SELECT CAST('x' AS INTEGER)"))
    assert isinstance(conversion, QueryError)
    no_file = translate(raised(con, "SELECT * FROM read_csv_auto('/nonexistent/cairn/none.csv')"))
    assert isinstance(no_file, NotFound)


def test_the_lockdown_refusal_is_forbidden(tmp_path: Path) -> None:
    outside = tmp_path / "outside.csv"
    outside.write_text("a\n1\n")
    db = open_locked(
        Lockdown(allowed=(str(tmp_path / "root"),), temp_dir=str(tmp_path / "tmp"), memory_limit="256MB", threads=1)
    )
    try:
        err = translate(raised(db, f"SELECT * FROM read_csv_auto('{outside}')"))
    finally:
        db.close()
    assert isinstance(err, Forbidden) and err.message.startswith("Access refused by the sandbox")


def test_the_watchdog_and_our_own_errors() -> None:
    assert isinstance(translate(TimedOut()), Timeout)
    own = InvalidInput("as it was")
    assert translate(own) is own
    with pytest.raises(ValueError, match="a bug"):
        translate(ValueError("a bug"))


def test_a_long_message_is_cut_to_its_first_line(con: duckdb.DuckDBPyConnection) -> None:
    err = translate(raised(con, "SELECT * FROM people WHERE " + " AND ".join(["age >"] * 2)))
    assert isinstance(err, CairnError) and "\n" not in err.message and len(err.message) <= 420


def test_a_broken_file_is_4004_naming_its_dataset_and_no_path_reaches_the_caller(
    con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    path = tmp_path / "uploads" / "pq2.parquet"
    path.parent.mkdir()
    con.execute(f"COPY (SELECT range AS id FROM range(100)) TO '{path}' (FORMAT parquet)")
    good = path.read_bytes()
    footer = int.from_bytes(good[-8:-4], "little")
    path.write_bytes(good[:-8] + (footer + 37).to_bytes(4, "little") + b"PAR1")  # a TProtocolException
    exc = raised(con, f"SELECT * FROM read_parquet('{path}')")
    err = translate(exc, files={str(path): "pq2"})
    assert isinstance(err, QueryError) and "dataset 'pq2' cannot be read" in err.message, err.message
    assert str(tmp_path) not in err.message and err.query_context is None
    path.write_bytes(good[:-8] + (10**7).to_bytes(4, "little") + b"PAR1")  # a footer past the file
    err = translate(raised(con, f"SELECT * FROM read_parquet('{path}')"), files={str(path): "pq2"})
    assert err.code == 4004 and "'pq2'" in err.message and str(tmp_path) not in err.message
    # Any other error keeps its class, with the paths it names cut to their file or dataset names.
    missing = translate(raised(con, f"SELECT * FROM read_csv_auto('{tmp_path}/none.csv')"))
    assert str(tmp_path) not in missing.message and "none.csv" in missing.message
    assert str(tmp_path) not in (missing.query_context or "")


def test_without_paths_keeps_names_only() -> None:
    files = {"/srv/data/projects/p/uploads/sales.csv": "sales"}
    assert without_paths("in '/srv/data/projects/p/uploads/sales.csv'", files) == "in 'sales'"
    assert without_paths('read "/a/b/c.parquet" failed', {}) == 'read "c.parquet" failed'
    assert without_paths("read_csv('/srv/data/proj<<<...", {}) == "read_csv('proj<<<..."
    assert without_paths("1/2 is not a path", {}) == "1/2 is not a path"


def test_suggested_columns_are_named_once(con: duckdb.DuckDBPyConnection) -> None:
    err = translate(raised(con, "SELECT regon FROM people"), ["region", "region", "name", "region_id", "name"])
    assert "Known columns include: region, region_id" in err.suggestions


def test_a_file_that_cannot_be_opened_never_shows_the_view_that_opens_it(
    con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    path = tmp_path / "short.parquet"
    path.write_bytes(b"PAR1")
    exc = raised(con, f"CREATE VIEW short AS SELECT * FROM read_parquet('{path}')")
    err = translate(exc, [], {str(path): "short"}, opening=True)
    assert isinstance(err, QueryError) and err.message.startswith("The file of dataset 'short' cannot be read")
    assert err.query_context is None and "VIEW" not in err.message and str(tmp_path) not in err.message
    gone = raised(con, f"CREATE VIEW gone AS SELECT * FROM read_parquet('{tmp_path}/gone.parquet')")
    assert isinstance(translate(gone, [], {f"{tmp_path}/gone.parquet": "gone"}, opening=True), NotFound)
