"""app/datasets/sandbox.py: one read-only statement, allowed functions, paths inside the data roots."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.errors import CairnError
from app.datasets.sandbox import check_sql


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
