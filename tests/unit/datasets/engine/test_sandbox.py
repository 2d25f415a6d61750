"""app/datasets/engine/sandbox.py: one read-only statement, allowed functions, paths inside the data roots."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.errors import CairnError
from app.datasets.engine.sandbox import check_sql


def test_a_file_inside_the_roots_is_read_and_reported(tmp_path: Path) -> None:
    data = tmp_path / "a.csv"
    data.write_text("x\n1\n")
    sql, files = check_sql(f"SELECT * FROM '{data}' ;", [tmp_path])
    assert (sql, files) == (f"SELECT * FROM '{data}'", [str(data)])


@pytest.mark.parametrize(
    ("sql", "code", "message"),
    [
        ("DELETE FROM t", 4030, "DELETE statements are not allowed: queries are read-only"),
        ("SELECT 1; SELECT 2", 4030, "Exactly one statement per query is allowed"),
        ("SELECT read_text('/etc/passwd')", 4030, "The function read_text() is not allowed"),
        ("SELECT * FROM '/etc/passwd'", 4030, "Path '/etc/passwd' is outside the data roots"),
        ("SELEC 1", 4004, 'The query does not parse: syntax error at or near "SELEC"'),
        ("  ;  ", 4001, "The query is empty"),
    ],
)
def test_refusals(tmp_path: Path, sql: str, code: int, message: str) -> None:
    with pytest.raises(CairnError) as caught:
        check_sql(sql, [tmp_path])
    assert (caught.value.code, caught.value.message) == (code, message)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_text/**/('/etc/passwd')",
        "SELECT * FROM read_text /* a */ /* b */ ('/etc/passwd')",
        "SELECT * FROM read_text -- comment\n ('/etc/passwd')",
        "SELECT * FROM \"read_text\"('/etc/passwd')",
        "SELECT * FROM main.READ_TEXT('/etc/passwd')",
        "SELECT getenv/**/('HOME')",
        "SELECT ('HOME').getenv()",
        "SELECT current_setting('temp_directory')",
        "SELECT current_setting/**/('allowed_directories')",
        "SELECT ('temp_directory').current_setting()",
        "SELECT * FROM duckdb_settings()",
        "SELECT * FROM duckdb_extensions()",
        "SELECT * FROM duckdb_temporary_files()",
        "SELECT * FROM duckdb_secrets()",
        "SELECT * FROM duckdb_databases()",
        "SELECT * FROM duckdb_logs()",
        "SELECT * FROM duckdb_external_file_cache()",
        "SELECT * FROM duckdb_extension_repositories()",
        "SELECT * FROM duckdb_memory()",
        "SELECT * FROM pragma_version()",
        "SELECT * FROM pragma_platform()",
        "SELECT * FROM pragma_database_size()",
        "SELECT * FROM pragma_user_agent()",
        "SELECT * FROM which_secret('s3://b/x', 's3')",
        "SELECT * FROM json_execute_serialized_sql('{}')",
        "SELECT * FROM read_duckdb('x.duckdb')",
        "SELECT * FROM arrow_scan(0, 0, 0)",
        "SELECT * FROM checkpoint()",
        "SELECT * FROM enable_logging()",
        "SELECT write_log('x')",
    ],
)
def test_denied_functions_are_refused_whatever_separates_name_and_parenthesis(tmp_path: Path, sql: str) -> None:
    with pytest.raises(CairnError) as caught:
        check_sql(sql, [tmp_path])
    assert caught.value.code == 4030 and "is not allowed" in caught.value.message


@pytest.mark.parametrize(
    "sql",
    ["SHOW temp_directory", "FROM (SHOW allowed_directories)", 'SHOW "home_directory"', "SHOW /* x */ threads"],
)
def test_show_of_a_setting_is_refused(tmp_path: Path, sql: str) -> None:
    with pytest.raises(CairnError) as caught:
        check_sql(sql, [tmp_path])
    assert caught.value.code == 4030 and "settings are not readable" in caught.value.message


@pytest.mark.parametrize(
    "sql",
    [
        "SHOW TABLES",
        "SHOW data",
        "DESCRIBE data",
        "SELECT view_name FROM duckdb_views() WHERE NOT internal",
        "SELECT column_name FROM duckdb_columns()",
        "SELECT 1 AS query, 2 AS current_setting",
        "SELECT query FROM (SELECT 1 AS query) -- read_text(",
        "SELECT 'read_text(' AS s /* getenv( */",
    ],
)
def test_names_that_are_not_denied_calls_pass(tmp_path: Path, sql: str) -> None:
    assert check_sql(sql, [tmp_path])[0] == sql
