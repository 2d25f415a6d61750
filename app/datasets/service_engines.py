"""Which engine runs an execute_query call (`choose`), and why, in the seed's words when the caller
left the choice to `auto`; errors of the polars_expr engine phrased for its caller (`for_polars`).

The query's language decides first: SQL runs on DuckDB, a polars_expr chain is compiled to DuckDB SQL,
python code runs in the (operator-enabled) pandas engine. With `engine: auto` the language is the
query's own when its text is recognizably python (an import, or an assignment to `result` in a text
that does not start as SQL) or a polars chain (whatever `query_type` says), and
the seed's rules then name the choice: ML imports → pandas; python code over inputs under 10 MB →
pandas; multiple files → DuckDB; SQL → DuckDB; a polars chain (complex transforms) → polars."""

from __future__ import annotations

import dataclasses
import re

from app.core.errors import CairnError, InvalidInput, NotFound
from app.datasets.schemas import QueryIn

# The seed's size rule: inputs under this many bytes in all suit pandas (its ecosystem).
SMALL_INPUT_BYTES = 10 * 1024 * 1024
# Modules whose import makes python code "ML operations" (the seed's rule 5).
ML_MODULES = ("sklearn", "scipy", "statsmodels", "xgboost", "lightgbm", "torch", "tensorflow", "keras")
_ML_IMPORT = re.compile(r"^[ \t]*(?:from|import)[ \t]+(" + "|".join(ML_MODULES) + r")\b", re.M)
# Python code: an import statement, or (in a text that does not start as SQL does) an assignment to
# `result`, which the python engine's code must make.
_IMPORT = re.compile(r"^[ \t]*(?:import[ \t]+\w|from[ \t]+[\w.]+[ \t]+import[ \t])", re.M)
_RESULT = re.compile(r"^[ \t]*result[ \t]*=(?!=)", re.M)
_SQL_START = re.compile(
    r"^\s*\(?\s*(?:select|with|from|describe|summarize|explain|pivot|unpivot|values|table|show)\b", re.I
)
_POLARS = re.compile(r"^\s*\(?\s*pl\.\w")


@dataclasses.dataclass(frozen=True)
class Choice:
    """The engine (`engine_used` as replies name it), the language it runs, and, for `auto`, why."""

    engine: str
    language: str
    reason: str | None = None
    ml: str | None = None  # the ML module the code imports, when that decided


def language_of(text: str) -> str | None:
    """'python' or 'polars_expr' when `text` is recognizably one (None: any other text, SQL included)."""
    if _POLARS.match(text):
        return "polars_expr"
    if _IMPORT.search(text) or (_RESULT.search(text) and not _SQL_START.match(text)):
        return "python"
    return None


def choose(args: QueryIn, python_enabled: bool) -> Choice:
    """The engine of a call: the one named, or `auto`'s by the seed's rules (see the module). The
    reason of an `auto` choice is completed once the inputs are known (`with_inputs`)."""
    if args.engine != "auto":
        return Choice(_named(args, python_enabled), args.query_type)
    language = language_of(args.query) or args.query_type
    given = f" (query_type '{args.query_type}' was given)" if language != args.query_type else ""
    if language == "python":
        ml = _ML_IMPORT.search(args.query)
        if not python_enabled:
            why = f"the code imports {ml.group(1)}" if ml else "the query is python code"
            raise _disabled(
                f"engine 'auto' chose pandas ({why}{given}), but the python engine is disabled on this server"
            )
        return Choice("python", "python", given, ml.group(1) if ml else None)
    if language == "polars_expr":
        return Choice("polars_expr→duckdb", "polars_expr", given)
    return Choice("duckdb", "sql", given)


def with_inputs(choice: Choice, files: int, size: int) -> str | None:
    """The reason of an `auto` choice, now that its inputs (`files` files of `size` bytes) are known;
    None for a named engine."""
    if choice.reason is None:
        return None
    weight = f"{size / (1024 * 1024):.1f} MB"
    # Short: every reply of `auto` carries it, within its token budget.
    if choice.language == "python":
        if choice.ml:
            why = f"imports {choice.ml}: ML operations → pandas"
        elif size < SMALL_INPUT_BYTES:
            why = f"python code, {weight} of input: files under 10 MB → pandas"
        else:
            why = f"python code runs on pandas only ({weight} of input: SQL on DuckDB streams large files)"
    elif files > 1:
        chain = " (the polars_expr chain compiled to SQL)" if choice.language == "polars_expr" else ""
        why = f"{files} files: multiple files → duckdb{chain}"
    elif choice.language == "polars_expr":
        why = "polars_expr chain: complex transforms → polars (compiled to DuckDB SQL)"
    else:
        why = "SQL query → duckdb"
    return why + choice.reason


def _named(args: QueryIn, python_enabled: bool) -> str:
    """The engine the caller named, refused when it does not run the query_type."""
    if args.query_type == "python" or args.engine == "pandas":
        if args.query_type != "python":
            raise InvalidInput("engine 'pandas' runs query_type 'python' only")
        if not python_enabled:
            raise _disabled("The python/pandas engine is disabled on this server")
        return "python"
    if args.query_type == "polars_expr":
        if args.engine == "duckdb":
            raise InvalidInput("engine 'duckdb' runs query_type 'sql'; use engine 'polars' or 'auto' for polars_expr")
        return "polars_expr→duckdb"
    if args.engine == "polars":
        raise InvalidInput("engine 'polars' runs query_type 'polars_expr'; use 'duckdb' or 'auto' for SQL")
    return "duckdb"


def _disabled(message: str) -> InvalidInput:
    return InvalidInput(
        message,
        suggestions=[
            "Use query_type 'sql' (DuckDB) or 'polars_expr'",
            "An operator can enable it with CAIRN_DATASETS_PYTHON_ENABLED=true",
        ],
    )


_NO_TABLE = re.compile(r"Table with name (\S+?) does not exist", re.I)
_NO_FILE = re.compile(r"""(?:Cannot access file|No files found that match the pattern) ["']?([^"'\s]+)""", re.I)
_BAD_DATE = re.compile(r"according to format specifier", re.I)


def for_polars(exc: CairnError, names: list[str]) -> CairnError:
    """A polars_expr call's error as its caller reads it: a missing view or file named in polars' terms
    (`pl.scan_csv('orders')` needs a registered dataset or a file's path), a date that does not parse
    with the `strict=False` way out; DuckDB's own wording of the sandbox never reaches the caller."""
    text = exc.message
    table = _NO_TABLE.search(text)
    if table is not None or "file system operations are disabled" in text:
        file = _NO_FILE.search(text)
        missing = table.group(1) if table is not None else file.group(1) if file is not None else "the input"
        known = [n for n in names if n.lower() == missing.lower()]
        subject = f"pl.scan_csv('{known[0]}')" if known else f"'{missing}'"
        err = NotFound(
            f"polars_expr: {subject} names no registered dataset, view or file of this project: "
            f"write pl.scan_csv('<registered dataset name>'), pl.scan_csv('<file>.csv') (a path inside the "
            f"data roots, globs allowed) or pl.table('<view>') for a view of `files`",
            suggestions=["list_datasets shows the registered names and the files", "register_dataset names a file"],
        )
        err.query_context = exc.query_context
        return err
    if _BAD_DATE.search(text):
        exc.message = f"polars_expr: {text}"
        exc.suggestions = [
            "Check the format (chrono/strftime codes, e.g. '%Y-%m-%d')",
            "strict=False gives null for the values that do not parse",
        ]
        return exc
    if not text.startswith("polars_expr"):
        exc.message = f"polars_expr: {text}"
    return exc
