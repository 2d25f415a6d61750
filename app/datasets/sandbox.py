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
3. `open_locked` — an in-memory DuckDB with extension auto-install/auto-load off, the external file
   cache off, `allowed_directories` = the roots (plus the result store), `memory_limit` / `threads`
   from settings, then `enable_external_access = false` (which also stops queries from reading
   Python objects by name) and `lock_configuration = true`, so even a query that slipped past (2)
   cannot reach other files, the network, extensions or settings. Locked databases are pooled per
   `Lockdown` (`ConnectionPool`): a call leases one for its duration (`Lease`) and works on a fresh
   connection to it, so connection state (temporary objects, prepared statements, variables, a
   pending interrupt) ends with the call; the views the call made are dropped. The database goes
   back to the pool only when the call ended normally or with an error about its statement
   (`STATEMENT_ERRORS`) and the reset left no table, view, sequence or attached database behind;
   otherwise (the watchdog fired, an interrupt, out of memory, an internal or unexpected error) it
   is closed.
4. `run_with_timeout` — a watchdog timer calls `interrupt()` on the call's connection when the
   statement runs past its time limit (→ 5003). The time limit is the whole call's (`CALL_DEADLINE`,
   set by the worker process for each request, see `time_left`).
5. Worker processes (`app.datasets.worker`) — the server runs every DuckDB call in a worker process
   holding its own pool of locked databases (3, 4 run there). DuckDB checks an interrupt only between
   vectors, so a scalar function busy on one huge value outruns (4): the server kills the worker when
   no answer has come shortly after the time limit (→ 5003) and starts another. Each worker's memory
   is capped by `RLIMIT_DATA` beside DuckDB's `memory_limit`, and one API key holds at most half of
   the engine slots.
"""

from __future__ import annotations

import atexit
import glob as globmod
import heapq
import itertools
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from app.core.errors import CairnError, Forbidden, InvalidInput, NotFound, QueryError

T = TypeVar("T")

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
    tokens = duckdb.tokenize(text)
    # The tokens as DuckDB reads them: (start, end, type, text) without comments, so that a comment
    # between a function's name and its parenthesis hides nothing.
    spans = [
        (start, tokens[i + 1][0] if i + 1 < len(tokens) else len(text), getattr(ttype, "name", str(ttype)))
        for i, (start, ttype) in enumerate(tokens)
    ]
    words = [(start, end, kind, text[start:end].strip()) for start, end, kind in spans if kind != "comment"]
    for i, (_, _, kind, piece) in enumerate(words):
        if kind not in ("identifier", "keyword"):
            continue
        word = piece.strip('"').lower()
        nxt = words[i + 1][3] if i + 1 < len(words) else ""
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


@dataclass(frozen=True)
class Lockdown:
    """What a locked database is opened with; connections are pooled per lockdown."""

    allowed: tuple[str, ...]
    temp_dir: str
    memory_limit: str
    threads: int


def open_locked(lock: Lockdown) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB, locked down before anything else runs on it."""
    con = duckdb.connect(
        ":memory:",
        config={
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "memory_limit": lock.memory_limit,
            "threads": max(1, lock.threads),
        },
    )
    try:
        # A reused database must not serve one call's cached file blocks to a later one (DuckDB >= 1.3).
        found = con.execute("SELECT count(*) FROM duckdb_settings() WHERE name = 'enable_external_file_cache'")
        if found.fetchone() != (0,):
            con.execute("SET enable_external_file_cache = false")
        dirs = ", ".join(sql_string(d.rstrip("/") + "/") for d in lock.allowed)
        con.execute(f"SET allowed_directories = [{dirs}]")
        con.execute(f"SET temp_directory = {sql_string(lock.temp_dir)}")
        # TIMESTAMPTZ values read, rendered, summarized and exported alike whatever the host's zone.
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


# Errors DuckDB raises about the statement itself; the database is as it was before the call.
STATEMENT_ERRORS: tuple[type[BaseException], ...] = (
    CairnError,
    duckdb.BinderException,
    duckdb.CatalogException,
    duckdb.ParserException,
    duckdb.ConversionException,
    duckdb.InvalidInputException,
    duckdb.InvalidTypeException,
    duckdb.TypeMismatchException,
    duckdb.OutOfRangeException,
    duckdb.NotImplementedException,
    duckdb.IOException,
    duckdb.PermissionException,
)

# A pooled database goes back only when this lists the names of the views the pool made in it and
# nothing else: no table or sequence ('' rows), no database attached beyond the built-in ones (the
# configuration itself is locked). A view's definition is not read back (rendering it costs more than
# the rest): calls cannot replace a view (check_sql passes no DDL).
_LEFTOVERS = (
    "SELECT view_name FROM duckdb_views() WHERE NOT internal UNION ALL SELECT '' FROM duckdb_tables()"
    " UNION ALL SELECT '' FROM duckdb_sequences()"
    " UNION ALL SELECT '' FROM duckdb_databases() WHERE NOT internal AND database_name <> 'memory'"
)


class Lease:
    """One call's use of a pooled locked database: `con` is a fresh connection (a cursor) to it, so
    connection state (temporary objects, prepared statements, variables, a pending interrupt) ends
    with the call. The call's views are set with `use_views`; they stay in the database for a later
    call that wants the same ones (creating a view costs about half a millisecond)."""

    def __init__(self, pool: ConnectionPool, lock: Lockdown, keep: int) -> None:
        self._pool = pool
        self._lock = lock
        self._keep = keep
        self._pooled = pool._take(lock)
        try:
            self.con = self._pooled.db.cursor()
        except BaseException:
            self._pooled.db.close()
            raise
        self.reusable = True

    def use_views(self, wanted: dict[str, tuple[str, str]]) -> None:
        """Make the database hold exactly the views `wanted`: name -> (body, stamp). A view left by an
        earlier call is kept when its body and stamp (what its files were then: size and modification
        time) are the same, replaced when not, and dropped when this call does not name it."""
        pooled = self._pooled
        changed = False
        # Each record changes only once its statement succeeded: a view that failed to change is still
        # the old one, recorded as such, and dropped by the next call that does not name it.
        for name in [n for n in pooled.views if n not in wanted]:
            changed = True
            self.con.execute(f"DROP VIEW IF EXISTS {ident(name)}")
            del pooled.views[name]
        for name, spec in wanted.items():
            if pooled.views.get(name) == spec:
                continue
            changed = True
            self.con.execute(f"CREATE OR REPLACE VIEW {ident(name)} AS {spec[0]}")
            pooled.views[name] = spec
        if changed:
            pooled.catalog = _catalog(pooled.db)

    def discard(self) -> None:
        """Close the database at the end of the lease instead of reusing it."""
        self.reusable = False

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc is not None and not isinstance(exc, STATEMENT_ERRORS):
            self.reusable = False
        try:
            self.con.close()
        except Exception:
            self.reusable = False
        if self.reusable and self._pool.defer_checks:
            self._pool._unsettled.append((self._lock, self._pooled, self._keep))
        else:
            self._pool._release(self._lock, self._pooled, self.reusable and _clean(self._pooled), self._keep)


def _clean(pooled: _Pooled) -> bool:
    """True when the database holds only the views `Lease.use_views` made (its catalog as then)."""
    try:
        return _catalog(pooled.db) == pooled.catalog
    except Exception:
        return False


def _catalog(db: duckdb.DuckDBPyConnection) -> list[str]:
    """What a database holds beyond its built-in objects (see `_LEFTOVERS`), sorted."""
    return sorted(str(r[0]) for r in db.execute(_LEFTOVERS).fetchall())


@dataclass
class _Pooled:
    """A locked database, the views it holds (name -> (body, stamp)) and its catalog as `_catalog`
    read it after they were made."""

    db: duckdb.DuckDBPyConnection
    views: dict[str, tuple[str, str]] = field(default_factory=dict)
    catalog: list[str] = field(default_factory=list)


class ConnectionPool:
    """Idle locked databases per `Lockdown`. A database serves one lease at a time (callers hold an
    engine slot while they lease, so at most that many exist per lockdown); `keep` bounds the idle
    ones, and only the `max_lockdowns` most recently used lockdowns keep any."""

    def __init__(self, max_lockdowns: int = 4) -> None:
        self._idle: OrderedDict[Lockdown, list[_Pooled]] = OrderedDict()
        self._mutex = threading.Lock()
        self._max_lockdowns = max_lockdowns
        self.opened = 0
        # A worker process sets this: the leftover check of a database a call used (a catalog query,
        # most of a millisecond) then waits for `settle`, which the worker runs once it has answered.
        self.defer_checks = False
        self._unsettled: list[tuple[Lockdown, _Pooled, int]] = []

    def lease(self, lock: Lockdown, keep: int) -> Lease:
        """A lease on an idle database of `lock`, or on a newly opened one."""
        return Lease(self, lock, keep)

    def settle(self) -> None:
        """Check the databases whose calls ended since the last time (see `defer_checks`), and give
        back the clean ones; a database with a leftover is closed."""
        while self._unsettled:
            lock, pooled, keep = self._unsettled.pop()
            self._release(lock, pooled, _clean(pooled), keep)

    def _take(self, lock: Lockdown) -> _Pooled:
        self.settle()
        with self._mutex:
            idle = self._idle.get(lock)
            if idle:
                self._idle.move_to_end(lock)
                return idle.pop()
            self.opened += 1
        return _Pooled(open_locked(lock))

    def _release(self, lock: Lockdown, db: _Pooled, clean: bool, keep: int) -> None:
        closing: list[_Pooled] = []
        with self._mutex:
            idle = self._idle.setdefault(lock, [])
            self._idle.move_to_end(lock)
            if clean and len(idle) < keep:
                idle.append(db)
            else:
                closing.append(db)
            while len(self._idle) > self._max_lockdowns:
                closing += self._idle.popitem(last=False)[1]
        for pooled in closing:
            pooled.db.close()

    def idle(self, lock: Lockdown) -> int:
        """How many databases of `lock` wait for a call."""
        with self._mutex:
            return len(self._idle.get(lock, []))

    def clear(self) -> None:
        """Close every idle database."""
        with self._mutex:
            closing = [pooled for idle in self._idle.values() for pooled in idle]
            self._idle.clear()
        for pooled in closing:
            pooled.db.close()


POOL = ConnectionPool()


class _Watchdogs:
    """One thread that interrupts connections whose deadline passed (a timer thread per statement cost
    a thread start and join each, a tenth of a millisecond or more)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: list[tuple[float, int, _Watchdog]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._cancelled = 0  # cancelled entries still in the heap (about)
        self._stopping = False

    def add(self, dog: _Watchdog, seconds: float) -> None:
        """Interrupt `dog`'s connection in `seconds` unless it is cancelled first."""
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + seconds, next(self._order), dog))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="cairn-duckdb-watchdog", daemon=True)
                self._thread.start()
            self._cv.notify()

    def cancel(self, dog: _Watchdog) -> None:
        """No interrupt for `dog` from now on; one already under way has landed when this returns (the
        interrupt is sent holding the lock this takes)."""
        with self._cv:
            dog.cancelled = True
            dog.con = None  # its entry may wait in the heap until its deadline: not the connection
            self._cancelled += 1
            if self._cancelled > 64 and self._cancelled * 2 > len(self._heap):
                self._heap = [entry for entry in self._heap if not entry[2].cancelled]
                heapq.heapify(self._heap)
                self._cancelled = 0

    def stop(self) -> None:
        """End the thread (at exit: a thread left waiting keeps DuckDB's module from being torn down
        cleanly)."""
        with self._cv:
            thread, self._thread = self._thread, None
            self._stopping = True
            self._cv.notify()
        if thread is not None:
            thread.join(timeout=5)
        with self._cv:
            self._stopping = False

    def _run(self) -> None:
        with self._cv:
            while not self._stopping:
                while self._heap and self._heap[0][2].cancelled:
                    heapq.heappop(self._heap)
                    self._cancelled = max(0, self._cancelled - 1)
                if not self._heap:
                    self._cv.wait()
                    continue
                due = self._heap[0][0] - time.monotonic()
                if due > 0:
                    self._cv.wait(due)
                    continue
                dog = heapq.heappop(self._heap)[2]
                dog.fired = True
                try:
                    if dog.con is not None:
                        dog.con.interrupt()
                except Exception:  # the connection may already be closed
                    pass
                dog.con = None
                del dog  # this thread outlives its calls: it keeps no connection alive


_WATCHDOGS = _Watchdogs()
atexit.register(_WATCHDOGS.stop)


class _Watchdog:
    def __init__(self, con: duckdb.DuckDBPyConnection, seconds: float) -> None:
        self.fired = False
        self.cancelled = False
        self.con: duckdb.DuckDBPyConnection | None = con
        self._seconds = seconds

    def __enter__(self) -> _Watchdog:
        _WATCHDOGS.add(self, self._seconds)
        return self

    def __exit__(self, *exc: Any) -> None:
        _WATCHDOGS.cancel(self)


# When the current call must end (`time.monotonic()`), set by a worker process for each request it
# serves: the statement's watchdog gets what is left of the whole call's time limit.
CALL_DEADLINE: ContextVar[float | None] = ContextVar("cairn_duckdb_call_deadline", default=None)


def time_left(limit: float) -> float:
    """Seconds the watchdog of the next statement may wait: `limit`, or less when the current call's
    deadline (`CALL_DEADLINE`) comes first (at least a millisecond: a statement started past it is
    interrupted at once)."""
    deadline = CALL_DEADLINE.get()
    if deadline is None:
        return limit
    return max(0.001, min(limit, deadline - time.monotonic()))


def run_with_timeout(con: duckdb.DuckDBPyConnection, seconds: float, fn: Callable[[], T]) -> tuple[T, bool]:
    """Run `fn` (which uses `con`); a watchdog interrupts the connection after `seconds`.

    Returns (result, fired): `fired` is True when the watchdog went off although `fn` still returned
    (the interrupt came too late to stop it). Raises TimedOut when the interrupt stopped `fn`."""
    with _Watchdog(con, seconds) as dog:
        try:
            value = fn()
        except duckdb.InterruptException:
            if dog.fired:
                raise TimedOut() from None
            raise
    return value, dog.fired


# A call whose caller takes an early answer (`WorkerPool.run_staged`) may send one before it ends.
EARLY_ALLOWED: ContextVar[bool] = ContextVar("cairn_datasets_early", default=False)
_early_sender: Callable[[Any], None] | None = None


def set_early_sender(send: Callable[[Any], None]) -> None:
    """How this (worker) process sends an early answer to the server."""
    global _early_sender
    _early_sender = send


def answer_early(value: Any) -> bool:
    """Send `value` as the current call's answer now, while the call goes on (e.g. to store a result
    its caller does not wait for); False (nothing sent) unless the call runs in a worker process for a
    caller that takes early answers. The call's final value or error is sent when it ends."""
    if _early_sender is None or not EARLY_ALLOWED.get():
        return False
    _early_sender(value)
    return True


class TimedOut(Exception):
    """The watchdog interrupted the statement."""
