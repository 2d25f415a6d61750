"""app/datasets/engine/sources.py: a view over a CSV file names the dialect DuckDB's sniffer found, and
reads what the sniffer reads."""

from __future__ import annotations

import gzip
from pathlib import Path

import duckdb
import pytest

from app.core.errors import SchemaError
from app.datasets.engine import databases, sources
from tests.support.datasets import small_engine_config


@pytest.fixture
def cfg(tmp_path: Path) -> databases.EngineConfig:
    """An engine configuration of its own (so its own pool key) with one small CSV in its root."""
    return small_engine_config(tmp_path, memory_limit="256MB", timeout_s=30)


def source(cfg: databases.EngineConfig, name: str = "a") -> sources.Source:
    path = cfg.roots[0] / "a.csv"
    return sources.make_source(name, str(path), [path])


CSVS = {
    "plain.csv": "a,b,c\n1,x,2.5\n2,y,3.5\n",
    "quoted.csv": 'id,text,n\n1,"hello, world",3\n2,"say ""hi""",4\n',
    "semicolon.csv": "a;b;c\n1;2,5;x\n2;3,5;y\n",
    "tabs.tsv": "a\tb\n1\thello world\n2\tbye\n",
    "pipes.txt": "a|b\n1|2\n3|4\n",
    "no_header.csv": "1,2,3\n4,5,6\n",
    "comments.csv": "# a comment\na,b\n1,2\n# another\n3,4\n",
    "preamble.csv": "report generated today\n\na,b,c\n1,2,3\n4,5,6\n",
    "backslash.csv": 'a,b\n1,"x \\" y"\n2,"z"\n',
    "crlf.csv": "a,b\r\n1,2\r\n3,4\r\n",
    "nulls.csv": "a,b\n,N/A\nNULL,null\n1,x\n",
    "dates.csv": "d,t\n02/01/2024,2024-01-02 10:11:12\n15/03/2024,2024-02-03 01:02:03\n",
    "ragged.csv": "a,b,c\n1,2\n3,4,5\n",
    "newline_in_quotes.csv": 'a,b\n1,"line1\nline2"\n2,"ok"\n',
    "header_only.csv": "a,b,c\n",
    "empty.csv": "",
}


@pytest.mark.parametrize("name", sorted(CSVS))
@pytest.mark.parametrize("sample_size", [None, 2])
def test_a_view_with_the_sniffed_dialect_reads_what_the_sniffer_reads(
    cfg: databases.EngineConfig, name: str, sample_size: int | None
) -> None:
    path = cfg.roots[0] / name
    path.write_text(CSVS[name], newline="")
    src = sources.make_source("t", str(path), [path])

    def both(con: duckdb.DuckDBPyConnection) -> tuple[object, object, str]:
        def read(table: str) -> object:
            try:
                rel = con.execute(f"SELECT * FROM {table}")
                return [d[0] for d in rel.description or []], [str(d[1]) for d in rel.description or []], rel.fetchall()
            except duckdb.Error as exc:
                return type(exc).__name__, str(exc).splitlines()[0]

        bound = src.bound_sql(con, sample_size)
        return read(src.sql(sample_size)), read(bound), bound

    auto, bound, text = databases.run_locked(cfg, [], lambda con: both(con))
    assert "delim = " in text
    assert bound == auto


def test_the_sniffed_dialect_follows_the_file(cfg: databases.EngineConfig) -> None:
    path = cfg.roots[0] / "changing.csv"
    path.write_text("a,b\n1,2\n")
    src = sources.make_source("changing", str(path), [path])
    rows = databases.run_locked(cfg, [src], lambda con: con.execute("SELECT * FROM changing").fetchall())
    assert rows == [(1, 2)]
    path.write_text("a;b;c\n1;2;3\n4;5;6\n")  # another size: another file version, sniffed again
    rows = databases.run_locked(cfg, [src], lambda con: con.execute("SELECT * FROM changing").fetchall())
    assert rows == [(1, 2, 3), (4, 5, 6)]


def test_each_format_is_read_by_its_table_function(tmp_path: Path) -> None:
    one = sources.make_source("p", str(tmp_path / "a.parquet"), [tmp_path / "a.parquet"])
    assert one.fmt == "parquet" and one.sql() == f"read_parquet('{tmp_path}/a.parquet', union_by_name = true)"
    assert sources.make_source("j", "/d/x.jsonl.gz", []).sql() == "read_json_auto('/d/x.jsonl.gz')"
    many = sources.make_source("c", "/d/*.csv", [Path("/d/1.csv"), Path("/d/2.csv")])
    assert many.sql(sample_size=50) == (
        "read_csv_auto('/d/*.csv', nullstr = ['', 'NA', 'N/A', 'NULL', 'null'], union_by_name = true, sample_size = 50)"
    )


def test_a_dialect_is_found_once_per_file_version(cfg: databases.EngineConfig) -> None:
    path = cfg.roots[0] / "semi.csv"
    path.write_text("a;b\n1;2\n")
    con = duckdb.connect(":memory:")
    try:
        found = sources.csv_dialect(con, str(path), "")
        assert "delim = ';'" in found
        assert sources.csv_dialect(con, str(path), "") == found  # remembered for this version of the file
        assert sources.csv_dialect(con, str(cfg.roots[0] / "missing.csv"), "") == ""
    finally:
        con.close()


def test_a_csv_wider_than_the_column_limit_is_refused_before_duckdb_reads_it(tmp_path: Path) -> None:
    wide = tmp_path / "wide.csv"
    wide.write_text(";".join(f"c{i}" for i in range(501)) + "\n" + ";".join("1" for _ in range(501)) + "\n")
    packed = tmp_path / "wide.csv.gz"
    packed.write_bytes(gzip.compress(wide.read_bytes()))
    narrow = tmp_path / "narrow.csv"
    narrow.write_text("a,b\n1,2\n")
    for path in (wide, packed):
        with pytest.raises(SchemaError) as refused:
            sources.check_width([sources.make_source("wide", str(path), [path])], max_columns=500)
        assert "'wide' has about 501 columns" in refused.value.message
        assert "CAIRN_DATASETS_MAX_COLUMNS" in refused.value.message
    sources.check_width([sources.make_source("wide", str(wide), [wide])], max_columns=501)
    sources.check_width([sources.make_source("narrow", str(narrow), [narrow])], max_columns=2)
    parquet = tmp_path / "p.parquet"
    parquet.write_bytes(b"PAR1" + b",;" * 1000 + b"PAR1")  # not a CSV: not counted here
    sources.check_width([sources.make_source("p", str(parquet), [parquet])], max_columns=2)
