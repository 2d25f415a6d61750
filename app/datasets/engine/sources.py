"""The inputs of a DuckDB call: a view name and the files (or glob pattern) behind it (`Source`), read
by the table function of their format; a single CSV file names the dialect DuckDB's sniffer found
for it (`csv_dialect`)."""

from __future__ import annotations

import functools
import gzip
import os
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import duckdb

from app.core.errors import SchemaError
from app.datasets.engine.sandbox import file_format
from app.datasets.engine.sandbox import sql_string as lit


@dataclass
class Source:
    """One input: a view name and the files (or glob pattern) behind it."""

    name: str
    pattern: str
    files: list[Path]
    fmt: str

    def sql(self, sample_size: int | None = None) -> str:
        """The DuckDB table function reading this source (its definition: cache keys use this)."""
        if self.fmt == "parquet":
            return f"read_parquet({lit(self.pattern)}, union_by_name = true)"
        if self.fmt == "json":
            return f"read_json_auto({lit(self.pattern)})"
        return f"read_csv_auto({lit(self.pattern)}{self._csv_options(sample_size)})"

    def _csv_options(self, sample_size: int | None) -> str:
        opts = ", nullstr = ['', 'NA', 'N/A', 'NULL', 'null']"
        opts += ", union_by_name = true" if len(self.files) > 1 else ""
        if sample_size:
            opts += f", sample_size = {int(sample_size)}"
        return opts

    def bound_sql(self, con: duckdb.DuckDBPyConnection, sample_size: int | None = None) -> str:
        """`sql()` as a view is made from it: a single CSV file also names the dialect DuckDB's sniffer
        found for it (see `csv_dialect`), which reads the same rows without searching again."""
        if self.fmt != "csv" or len(self.files) != 1 or self.pattern != str(self.files[0]):
            return self.sql(sample_size)
        opts = self._csv_options(sample_size)
        return f"read_csv_auto({lit(self.pattern)}{opts}{csv_dialect(con, self.pattern, opts)})"


# Binding a view over a CSV file runs DuckDB's sniffer, and most of its cost, even for a small file, is
# the dialect search; the types and header are found again at every bind regardless.
# The dialect found once per file version (path, size, mtime) is named in later views: DuckDB's
# `sniff_csv` reports exactly what `read_csv_auto` would detect with the same options.
_DIALECTS: OrderedDict[tuple[str, int, int, str], str] = OrderedDict()
_DIALECTS_LOCK = threading.Lock()
_DIALECTS_MAX = 512
_NEW_LINES = ("\\n", "\\r\\n", "\\r")


def csv_dialect(con: duckdb.DuckDBPyConnection, path: str, opts: str) -> str:
    """`, delim = …, quote = …, escape = …, new_line = …, comment = …, skip = …` as DuckDB's sniffer
    detects them for the CSV file `path` read with `opts`; '' when it cannot tell (the view then
    sniffs as before)."""
    try:
        st = os.stat(path)
    except OSError:
        return ""
    key = (path, st.st_size, st.st_mtime_ns, opts)
    with _DIALECTS_LOCK:
        known = _DIALECTS.get(key)
        if known is not None:
            _DIALECTS.move_to_end(key)
            return known
    try:
        row = con.execute(
            f"SELECT Delimiter, Quote, Escape, NewLineDelimiter, Comment, SkipRows FROM sniff_csv({lit(path)}{opts})"
        ).fetchone()
    except duckdb.Error:
        return ""
    if row is None:
        return ""
    delim, quote, escape, new_line, comment = ("" if v == "(empty)" else str(v) for v in row[:5])
    if not delim or new_line not in _NEW_LINES:
        return ""
    found = (
        f", delim = {lit(delim)}, quote = {lit(quote)}, escape = {lit(escape)}, new_line = {lit(new_line)}"
        f", comment = {lit(comment)}, skip = {int(row[5])}"
    )
    with _DIALECTS_LOCK:
        _DIALECTS[key] = found
        while len(_DIALECTS) > _DIALECTS_MAX:
            _DIALECTS.popitem(last=False)
    return found


# How much of a CSV file's start is read to count its columns: a header longer than this counts as
# what it holds so far, which is enough to refuse a file past any sensible limit.
HEADER_BYTES = 4 * 1024 * 1024
_DELIMITERS = (b",", b"\t", b";", b"|")


@functools.lru_cache(maxsize=512)
def _csv_width(path: str, size: int, mtime_ns: int) -> int:
    """An upper bound on the columns of the CSV file `path` (of this size and time): the most
    frequent common delimiter of its first line, plus one. 0 when the file cannot be read here
    (DuckDB then reports what it finds)."""
    try:
        opener = gzip.open if path.lower().endswith(".gz") else open
        with opener(path, "rb") as f:
            head = f.read(HEADER_BYTES)
    except (OSError, EOFError, zlib.error):
        return 0
    line = head.split(b"\n", 1)[0]
    return max(line.count(d) for d in _DELIMITERS) + 1


def check_width(sources: list[Source], max_columns: int) -> None:
    """Refuse (4003) a CSV source whose first line holds more than `max_columns` columns: DuckDB's
    sniffer needs memory for every column of every candidate dialect, and runs out before it can
    answer for a file of tens of thousands of columns."""
    for src in sources:
        if src.fmt != "csv":
            continue
        for f in src.files:
            try:
                st = f.stat()
            except OSError:
                continue
            width = _csv_width(str(f), st.st_size, st.st_mtime_ns)
            if width > max_columns:
                raise SchemaError(
                    f"Dataset '{src.name}' has about {width} columns; the limit is {max_columns} "
                    "(CAIRN_DATASETS_MAX_COLUMNS)",
                    suggestions=["Split the file into narrower ones, or store it as Parquet with fewer columns"],
                )


def make_source(name: str, pattern: str, files: list[Path]) -> Source:
    """A Source for a resolved pattern (the format comes from the first file)."""
    return Source(name=name, pattern=pattern, files=files, fmt=file_format(str(files[0]) if files else pattern))
