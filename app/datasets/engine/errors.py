"""DuckDB's exceptions as the caller's errors (`translate`): bounded text, suggestions, and the place
in the statement the error points at."""

from __future__ import annotations

import difflib
import re

import duckdb

from app.core.errors import (
    CairnError,
    EngineError,
    Forbidden,
    MemoryLimit,
    NotFound,
    QueryError,
    SchemaError,
    Timeout,
)
from app.datasets.engine.sandbox import duckdb_context, first_line
from app.datasets.engine.watchdog import TimedOut

_MISSING_COLUMN = re.compile(r'column "?([^"\s]+)"? not found', re.I)
# A quoted absolute path in DuckDB's text: no server path reaches a caller.
_QUOTED_PATH = re.compile(r"""(["'])(/[^"'\n<>…]*)""")  # closed or cut short (`duckdb_context`)
# What DuckDB says of a file it cannot decode (a damaged or hand-made Parquet file, a bad footer).
_BROKEN_FILE = re.compile(
    r"TProtocolException|Variable-length int|magic bytes|Footer length|Could not read enough bytes|"
    r"not a parquet file|Thrift|corrupt|don.t know what type|too small to be a Parquet|decompression failure",
    re.I,
)


def translate(
    exc: BaseException,
    known_columns: list[str] | None = None,
    files: dict[str, str] | None = None,
    opening: bool = False,
) -> CairnError:
    """A DuckDB exception as the caller's error, with bounded text and suggestions, and the place in
    the statement it points at (if any) as its query_context. `files` maps the paths of the call's
    sources to their dataset names: a file DuckDB cannot decode is the caller's input (4004 naming the
    dataset), and no path of the server stays in the text. `opening`: the error came from the server's
    own statement that opens the sources (a view over a file), so any error about the statement is one
    about the file, and the statement is never the context."""
    broken = _broken_file(exc, files or {}, opening)
    err = broken or _translate(exc, list(dict.fromkeys(known_columns or [])))
    # A broken file fails in the statement that makes its view, which is the server's, not the caller's.
    if isinstance(exc, duckdb.Error) and err.query_context is None and broken is None:
        err.query_context = duckdb_context(str(exc))
    err.message = without_paths(err.message, files or {})
    if err.query_context is not None:
        err.query_context = without_paths(err.query_context, files or {})
    return err


def without_paths(text: str, files: dict[str, str]) -> str:
    """`text` with each known file path replaced by its dataset name and any other quoted absolute
    path by its file name."""
    for path in sorted(files, key=len, reverse=True):
        text = text.replace(path, files[path])
    return _QUOTED_PATH.sub(lambda m: m.group(1) + m.group(2).rstrip("/").rsplit("/", 1)[-1], text)


def _broken_file(exc: BaseException, files: dict[str, str], opening: bool = False) -> CairnError | None:
    """The 4004 for a file DuckDB cannot decode (or, `opening`, cannot open as its format), naming its
    dataset; None for any other error."""
    if not isinstance(exc, duckdb.Error) or isinstance(
        exc, duckdb.OutOfMemoryException | duckdb.InterruptException | duckdb.PermissionException
    ):
        return None
    text = str(exc)
    if opening and isinstance(exc, duckdb.IOException) and ("No files found" in text or "No such file" in text):
        return None
    if not (_BROKEN_FILE.search(text) or (opening and files)):
        return None
    named = sorted({name for path, name in files.items() if path in text}) or sorted(set(files.values()))
    which = f"dataset '{named[0]}'" if len(named) == 1 else "a dataset of the call"
    return QueryError(
        f"The file of {which} cannot be read: it is damaged or not in its format "
        f"({without_paths(first_line(text), files)})",
        suggestions=["Upload the file again (replace=true), or export it again from its source"],
    )


def _translate(exc: BaseException, known_columns: list[str] | None = None) -> CairnError:
    if isinstance(exc, CairnError):
        return exc
    if isinstance(exc, TimedOut):
        return Timeout(
            "The query exceeded its time limit and was interrupted",
            suggestions=[
                "Filter or aggregate more, or query a Parquet copy of the data",
                "Raise CAIRN_DATASETS_QUERY_TIMEOUT_MS if this is expected",
            ],
        )
    msg = first_line(str(exc))
    if isinstance(exc, duckdb.PermissionException):
        return Forbidden(
            f"Access refused by the sandbox: {msg}", suggestions=["Only files inside the data roots can be read"]
        )
    if isinstance(exc, duckdb.OutOfMemoryException):
        return MemoryLimit(
            f"The query ran out of memory: {msg}",
            suggestions=["Aggregate or filter before selecting many columns", "Raise CAIRN_DATASETS_MEMORY_LIMIT"],
        )
    if isinstance(exc, duckdb.InterruptException):
        return Timeout("The query was interrupted")
    if isinstance(exc, duckdb.BinderException):
        m = _MISSING_COLUMN.search(str(exc))
        if m:
            missing = m.group(1)
            close = difflib.get_close_matches(missing, known_columns or [], n=3, cutoff=0.6)
            text = f"Column '{missing}' not found."
            if close:
                text += f" Did you mean '{close[0]}'?"
            return SchemaError(
                text,
                suggestions=[
                    "Check column names with profile_dataset",
                    *([f"Known columns include: {', '.join(close)}"] if close else []),
                ],
            )
        return SchemaError(msg, suggestions=["Check column names and types with profile_dataset"])
    if isinstance(exc, duckdb.CatalogException):
        return SchemaError(
            msg,
            suggestions=[
                "Tables are the names of the `files` you pass (see views in the "
                "result) or read_csv_auto('file.csv') calls"
            ],
        )
    if isinstance(exc, duckdb.ParserException):
        return QueryError(f"Syntax error: {msg}", suggestions=["Check the SQL syntax (DuckDB dialect)"])
    if isinstance(exc, duckdb.IOException):
        if "No files found" in str(exc) or "No such file" in str(exc):
            return NotFound(msg, suggestions=["list_datasets shows the available files"])
        return EngineError(f"Could not read the data: {msg}")
    if isinstance(exc, duckdb.ConversionException | duckdb.InvalidInputException | duckdb.InvalidTypeException):
        return QueryError(msg)
    if isinstance(exc, duckdb.Error):
        return EngineError(f"DuckDB failed: {msg}")
    raise exc
