"""The safety model: paths resolve only inside the data roots, SQL is checked on its parsed form,
and every DuckDB database is locked down before a caller's query touches it.

Layers, outermost first:
1. `resolve_path` — a dataset path (or glob) must land inside a data root after symlinks and `..`
   are resolved; anything else is refused before DuckDB sees it.
2. `check_sql` — the query is split into statements by DuckDB's own parser: exactly one statement,
   of an allowed type (SELECT, which covers WITH / DESCRIBE / SUMMARIZE / SHOW / FROM-first, or
   EXPLAIN). Tokens are then checked: denied functions (`read_text`, `read_blob`, `query`, …) are
   refused, and every string literal that names a file is resolved inside the roots and rewritten to
   its absolute path.
3. `databases.open_locked` — an in-memory DuckDB with extension auto-install/auto-load off, the
   external file cache off, `allowed_directories` = the roots (plus the result store), `memory_limit` /
   `threads` from settings, then `enable_external_access = false` (which also stops queries from
   reading Python objects by name) and `lock_configuration = true`, so even a query that slipped past
   (2) cannot reach other files, the network, extensions or settings. Locked databases are pooled and
   leased per call (`databases.ConnectionPool`), so connection state ends with the call.
4. `watchdog.run_with_timeout` — a watchdog interrupts the call's connection when the statement runs
   past its time limit (→ 5003).
5. Worker processes (`pool`) — the server runs every DuckDB call in a worker process holding its own
   pool of locked databases (3, 4 run there), and kills a worker that has not answered shortly after
   the time limit: DuckDB checks an interrupt only between vectors, so a scalar function busy on one
   huge value outruns (4).
"""

from __future__ import annotations

import glob as globmod
import os
import re
from pathlib import Path

import duckdb

from app.core.errors import Forbidden, InvalidInput, NotFound, QueryError

DATA_EXTENSIONS = (".csv", ".tsv", ".txt", ".parquet", ".pq", ".json", ".jsonl", ".ndjson")
COMPRESSED = (".gz", ".zst")
MAX_GLOB_FILES = 10_000

# Functions a caller may not use even inside an allowed statement: they read outside the data roots,
# run SQL the check never saw, reach other systems, change the database's state, or reveal the server's
# paths and configuration.
DENIED_FUNCTIONS = frozenset(
    {
        "read_text",
        "read_blob",
        "query",
        "query_table",
        "getenv",
        "current_setting",
        "which_secret",
        "load_aws_credentials",
        "read_xlsx",
        "read_duckdb",
        "sqlite_scan",
        "sqlite_attach",
        "postgres_scan",
        "postgres_attach",
        "mysql_scan",
        "iceberg_scan",
        "delta_scan",
        "http_get",
        "http_post",
        "json_execute_serialized_sql",
        "arrow_scan",
        "arrow_scan_dumb",
        "pandas_scan",
        "python_arrow_scan",
        "python_map_function",
        "checkpoint",
        "force_checkpoint",
        "enable_logging",
        "disable_logging",
        "truncate_duckdb_logs",
        "write_log",
        "enable_profiling",
        "disable_profiling",
        "create_external_resource",
        "destroy_external_resource",
        "register_external_resource",
        "register_external_resource_type",
        "deregister_external_resource",
    }
)
# Every function with one of these prefixes: DuckDB's settings, secrets, extensions, temporary files,
# logs, file cache, databases and connections (`duckdb_*`), and the PRAGMA table functions
# (`pragma_*`: version, platform, storage, database size, ...) ...
DENIED_PREFIXES = ("duckdb_", "pragma_")
# ... except these, which list only what the call's own database holds (its views and their columns,
# the built-in functions and types).
ALLOWED_CATALOG = frozenset(
    {
        "duckdb_views",
        "duckdb_tables",
        "duckdb_columns",
        "duckdb_schemas",
        "duckdb_types",
        "duckdb_functions",
        "duckdb_keywords",
        "duckdb_constraints",
        "duckdb_indexes",
        "duckdb_sequences",
        "duckdb_dependencies",
    }
)


def _setting_names() -> frozenset[str]:
    """DuckDB's setting names: `SHOW <setting>` answers the setting's value."""
    con = duckdb.connect(":memory:")
    try:
        return frozenset(str(r[0]).lower() for r in con.execute("SELECT name FROM duckdb_settings()").fetchall())
    finally:
        con.close()


DENIED_SETTINGS = _setting_names()
ALLOWED_STATEMENTS = ("SELECT", "EXPLAIN")


def file_format(path: str) -> str:
    """`csv`, `parquet` or `json` from a file name (compressed suffixes ignored)."""
    name = path.lower()
    for suffix in COMPRESSED:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".json", ".jsonl", ".ndjson")):
        return "json"
    if name.endswith((".csv", ".tsv", ".txt")):
        return "csv"
    raise InvalidInput(
        f"Unsupported file type: {Path(path).name}",
        suggestions=["Use CSV (.csv/.tsv), Parquet (.parquet) or JSON (.json/.jsonl/.ndjson)"],
    )


def inside(path: Path, roots: list[Path]) -> bool:
    """True when `path` (already resolved) lies in one of `roots`."""
    return any(path == root or path.is_relative_to(root) for root in roots)


def _outside(raw: str) -> Forbidden:
    return Forbidden(
        f"Path '{raw[:200]}' is outside the data roots",
        suggestions=[
            "Use a path inside CAIRN_DATA_ROOTS, or a registered dataset name",
            # an MCP client cannot send a file: the REST route takes it (and registers it by name)
            "To bring a file of your own: upload it with POST /api/v1/datasets/upload (multipart: name, file); "
            "it is registered under that name",
            "list_datasets shows what is available",
        ],
    )


def resolve_path(raw: str, roots: list[Path], *, must_exist: bool = True) -> tuple[str, list[Path]]:
    """Resolve a path or glob inside the roots. Returns (absolute pattern, matching files).

    Relative paths are tried against each root in order. A glob must match at least one file when
    `must_exist`; every match must also lie inside a root (symlinks resolved)."""
    if not raw or "\x00" in raw:
        raise InvalidInput("Empty or invalid path")
    if _URL.match(raw):  # outside every root, whether or not it would exist as a relative name
        raise _remote(raw)
    text = os.path.expanduser(raw) if raw.startswith("~") else raw
    candidates = [Path(text)] if os.path.isabs(text) else [root / text for root in roots]
    is_glob = any(ch in text for ch in "*?[")
    for cand in candidates:
        norm = Path(os.path.normpath(cand))
        if not is_glob:
            real = norm.resolve()
            if not inside(real, roots):
                raise _outside(raw)
            if real.is_file():
                return str(real), [real]
            if not must_exist:
                return str(real), []
            continue
        # Globs: the fixed directory part must be inside a root; each match is checked too.
        fixed = Path(*[p for p in norm.parts[: _first_glob_part(norm.parts)]])
        if not inside(fixed.resolve(), roots):
            raise _outside(raw)
        matches: list[Path] = []
        for i, hit in enumerate(globmod.iglob(str(norm), recursive=True)):
            if i >= MAX_GLOB_FILES:
                raise InvalidInput(f"The pattern '{raw}' matches more than {MAX_GLOB_FILES} files")
            real = Path(hit).resolve()
            if not inside(real, roots):
                raise _outside(hit)
            if real.is_file():
                matches.append(real)
        if matches:
            pattern = str(fixed.resolve() / Path(*norm.parts[_first_glob_part(norm.parts) :]))
            return pattern, sorted(matches)
    if must_exist:
        raise NotFound(
            f"No dataset file matches '{raw[:200]}'",
            suggestions=[
                "list_datasets shows the files and registered names",
                "Relative paths are resolved inside each data root",
            ],
        )
    real = Path(os.path.normpath(candidates[0])).resolve()
    if not inside(real, roots):
        raise _outside(raw)
    return str(real), []


def _first_glob_part(parts: tuple[str, ...]) -> int:
    for i, part in enumerate(parts):
        if any(ch in part for ch in "*?["):
            return i
    return len(parts)


def sql_string(value: str) -> str:
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def ident(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _strong_path(value: str) -> bool:
    low = value.lower()
    if low.startswith(("/", "~", "./", "../", ".\\")):
        return True
    base = low
    for suffix in COMPRESSED:
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base.endswith(DATA_EXTENSIONS) or low.endswith((".db", ".duckdb", ".sqlite", ".xlsx"))


_URL = re.compile(r"^[a-z][a-z0-9+.\-]{1,15}://", re.I)


def _remote(raw: str) -> Forbidden:
    return Forbidden(
        f"Remote URLs are not allowed ('{raw[:100]}'): only files inside the data roots",
        suggestions=[
            "Upload the file with POST /api/v1/datasets/upload, or ask the operator to place it in a data root",
            "list_datasets shows what is available",
        ],
    )


def _literal_path(value: str, roots: list[Path]) -> str | None:
    """The absolute pattern a string literal names, None when it is not a path."""
    if _URL.match(value):
        raise _remote(value)
    if _strong_path(value):
        return resolve_path(value, roots)[0]
    if "/" in value or "\\" in value:
        try:  # 'N/A' or '2024/01/02' are values, not files: leave them alone unless they match
            return resolve_path(value, roots)[0]
        except NotFound:
            return None
    return None


_STRING = re.compile(r"^'(.*)'$", re.S)


def check_sql(sql: str, roots: list[Path]) -> tuple[str, list[str]]:
    """Validate one read-only statement; return (rewritten SQL, files it reads by literal).

    Raises Forbidden for statements or functions outside the allow-list and for paths outside the
    roots, QueryError for SQL that does not parse."""
    text = sql.strip().rstrip(";").strip()
    if not text:
        raise InvalidInput("The query is empty")
    _check_statement(text)
    tokens = duckdb.tokenize(text)
    # The tokens as DuckDB reads them: (start, end, type), so that a comment between a function's name
    # and its parenthesis hides nothing (see `_check_words`).
    spans = [
        (start, tokens[i + 1][0] if i + 1 < len(tokens) else len(text), getattr(ttype, "name", str(ttype)))
        for i, (start, ttype) in enumerate(tokens)
    ]
    _check_words([(kind, text[start:end].strip()) for start, end, kind in spans if kind != "comment"])
    return _resolve_literals(text, spans, roots)


def _check_statement(text: str) -> None:
    """Refuse anything but exactly one statement of an allowed type."""
    try:
        statements = duckdb.extract_statements(text)
    except duckdb.Error as exc:
        raise QueryError(
            f"The query does not parse: {first_line(str(exc))}", suggestions=["Check the SQL syntax (DuckDB dialect)"]
        ) from None
    if len(statements) != 1:
        raise Forbidden("Exactly one statement per query is allowed", suggestions=["Send statements one at a time"])
    kind = statements[0].type.name
    if kind not in ALLOWED_STATEMENTS:
        raise Forbidden(
            f"{kind} statements are not allowed: queries are read-only",
            suggestions=["Use SELECT / WITH / DESCRIBE / SUMMARIZE / EXPLAIN", "Write files with export_result"],
        )


def _check_words(words: list[tuple[str, str]]) -> None:
    """Refuse a denied function called by name and a SHOW of one of DuckDB's settings; `words` are the
    statement's tokens (type, text), comments left out."""
    for i, (kind, piece) in enumerate(words):
        if kind not in ("identifier", "keyword"):
            continue
        word = piece.strip('"').lower()
        nxt = words[i + 1][1] if i + 1 < len(words) else ""
        denied = word in DENIED_FUNCTIONS or (word.startswith(DENIED_PREFIXES) and word not in ALLOWED_CATALOG)
        if nxt == "(" and denied:
            raise Forbidden(
                f"The function {word}() is not allowed",
                suggestions=["Read data files with read_csv_auto / read_parquet / read_json_auto"],
            )
        if word == "show" and kind == "keyword" and nxt.strip('"').lower() in DENIED_SETTINGS:
            raise Forbidden(
                f"SHOW {nxt.strip(chr(34)).lower()} is not allowed: the server's settings are not readable",
                suggestions=["SHOW / DESCRIBE a table or view of the query instead"],
            )


def _resolve_literals(text: str, spans: list[tuple[int, int, str]], roots: list[Path]) -> tuple[str, list[str]]:
    """`text` with every string literal that names a file rewritten to the absolute pattern it resolves
    to inside the roots, and those patterns."""
    out: list[str] = []
    files: list[str] = []
    pos = 0
    for start, end, kind_name in spans:
        piece = text[start:end]
        if kind_name != "string_const":
            continue
        body = piece.rstrip()
        m = _STRING.match(body)
        if not m:
            continue
        value = m.group(1).replace("''", "'")
        pattern = _literal_path(value, roots)
        if pattern is None:
            continue
        files.append(pattern)
        out.append(text[pos:start])
        out.append(sql_string(pattern) + piece[len(body) :])
        pos = end
    out.append(text[pos:])
    return "".join(out), files


def first_line(message: str) -> str:
    """The first line of a DuckDB error, without its `X Error:` prefix, bounded."""
    line = message.strip().splitlines()[0] if message.strip() else message
    line = re.sub(r"^[A-Za-z ]+ Error: ", "", line)
    return line[:400]


CONTEXT_WIDTH = 160  # characters of a query_context
_DUCKDB_SPOT = re.compile(r"^(LINE \d+: )(.*)\n( *)(\^+)", re.M)
_NAMED = re.compile(r"'([^'\n]{1,80})'|\"([^\"\n]{1,80})\"|\b([A-Za-z_]\w{0,79})\(\)")


def query_context(text: str, start: int | None = None, length: int = 0) -> str:
    """The part of a query around `start` on one line (whitespace collapsed, at most about
    CONTEXT_WIDTH characters, `…` where cut), the span `start..start+length` marked `>>>like this<<<`;
    without `start`, the beginning of the query."""

    def flat(piece: str) -> str:
        return " ".join(piece.split())

    if start is None or not 0 <= start <= len(text):
        whole = flat(text)
        return whole if len(whole) <= CONTEXT_WIDTH else whole[: CONTEXT_WIDTH - 1] + "…"
    end = min(len(text), start + max(length, 1))
    span = flat(text[start:end])[:80]
    room = max(20, (CONTEXT_WIDTH - len(span)) // 2)
    before, after = flat(text[:start]), flat(text[end:])
    left = ("…" + before[-room:]) if len(before) > room else before
    right = (after[:room] + "…") if len(after) > room else after
    return f"{left}{' ' if left and text[start - 1 : start].isspace() else ''}>>>{span}<<<" + (
        f"{' ' if right and text[end : end + 1].isspace() else ''}{right}"
    )


def duckdb_context(message: str) -> str | None:
    """The query_context of a DuckDB error that points at a place (its `LINE n:` and `^^^` lines)."""
    m = _DUCKDB_SPOT.search(message)
    if m is None:
        return None
    col = len(m.group(3)) - len(m.group(1))
    return query_context(m.group(2), col, len(m.group(4))) if col >= 0 else query_context(m.group(2))


def context_in(query: str, message: str) -> str:
    """The query_context of an error about `query`: the first name the message quotes ('x', "x" or
    x()) that the query holds as a whole word, else the beginning of the query."""
    for m in _NAMED.finditer(message):
        word = next(g for g in m.groups() if g)
        hit = re.search(r"(?<!\w)" + re.escape(word) + r"(?!\w)", query, re.I)
        if hit:
            return query_context(query, hit.start(), len(word))
    return query_context(query)
