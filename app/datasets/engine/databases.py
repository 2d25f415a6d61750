"""Locked DuckDB databases and the calls that run on them. The functions taking an `EngineConfig` first
are synchronous and run in a DuckDB worker process: the server calls them through `pool.offload` (or
`pool.offload_sync` from a thread), never directly, so that it can kill work that outruns its time
limit. Each call leases a pooled locked database of that process for its duration (`run_locked`),
with its own connection and views.

A locked database (`open_locked`) is an in-memory DuckDB locked down before anything else runs on it
(see `sandbox` for the whole safety model). Databases are pooled per `Lockdown` (`ConnectionPool`): a
call leases one (`Lease`) and works on a fresh connection to it, so connection state (temporary
objects, prepared statements, variables, a pending interrupt) ends with the call; the views the call
made (and the tables of small CSV files parsed once per version, `HELD_CSV_BYTES`) stay for a later
call that names the same files, and go when a call does not. The database goes back to the pool
only when the call ended normally or with an error about its statement (`STATEMENT_ERRORS`) and the
reset left no table, view, sequence or attached database behind but the pool's own; otherwise (the
watchdog fired, an interrupt, out of memory, an internal or unexpected error) it is closed."""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from app.core.errors import CairnError
from app.datasets.engine.cache import fingerprint
from app.datasets.engine.errors import translate
from app.datasets.engine.sandbox import ident, sql_string
from app.datasets.engine.sandbox import sql_string as lit
from app.datasets.engine.sources import Source, check_width
from app.datasets.engine.watchdog import run_with_timeout, time_left

T = TypeVar("T")
# A worker process spills into a folder of its own under the work directory's `tmp` (see `use_scratch`).
_scratch: str | None = None


@dataclass(frozen=True)
class EngineConfig:
    """Where DuckDB may read and write, and its limits."""

    roots: list[Path]
    work: Path
    memory_limit: str
    threads: int
    timeout_s: float
    concurrency: int = 2
    max_columns: int = 10_000  # of a CSV source (sources.check_width)
    # Local copies of the object store's files (uploads, stored results) that the call may read.
    stored: tuple[Path, ...] = ()

    @property
    def results(self) -> Path:
        return self.work / "results"

    @property
    def allowed(self) -> list[Path]:
        return [*self.roots, self.results, *self.stored]

    def lockdown(self, threads: int | None = None) -> Lockdown:
        """The locked-database settings of this configuration (the connection pool's key)."""
        return Lockdown(
            allowed=tuple(str(p) for p in self.allowed),
            temp_dir=str(self.work / "tmp" / _scratch) if _scratch else str(self.work / "tmp"),
            memory_limit=self.memory_limit,
            threads=threads or self.threads,
        )


def use_scratch(name: str) -> None:
    """Spill into `<work>/tmp/<name>` (a worker process names its own, which the server removes once the
    process is gone: a killed DuckDB leaves its spill files behind)."""
    global _scratch
    _scratch = name


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
# nothing else: no table ('' rows) but the pool's own of parsed files (`HELD_CSV_BYTES`), no sequence,
# no database attached beyond the built-in ones (the
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
    call that wants the same ones (so that a call does not pay for creating them again)."""

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

    def use_views(self, wanted: dict[str, tuple[str, str]], tables: dict[str, tuple[str, str]] | None = None) -> None:
        """Make the database hold exactly the views `wanted` and the tables `tables` (the files views
        read once parsed, see `HELD_CSV_BYTES`): name -> (body, stamp). One left by an earlier call is
        kept when its body and stamp (what its files were then) are the same, replaced when not, and
        dropped when this call does not name it."""
        pooled = self._pooled
        held = tables or {}
        changed = False
        # Each record changes only once its statement succeeded: a view that failed to change is still
        # the old one, recorded as such, and dropped by the next call that does not name it.
        for name in [n for n in pooled.views if n not in wanted]:
            changed = True
            self.con.execute(f"DROP VIEW IF EXISTS {ident(name)}")
            del pooled.views[name]
        for name in [n for n in pooled.tables if n not in held]:
            changed = True
            self.con.execute(f"DROP TABLE IF EXISTS {ident(name)}")
            del pooled.tables[name]
        for name, spec in held.items():
            if pooled.tables.get(name) == spec:
                continue
            changed = True
            pooled.tables.pop(name, None)
            self.con.execute(f"CREATE OR REPLACE TABLE {ident(name)} AS {spec[0]}")
            pooled.tables[name] = spec
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
    """A locked database, the views and the tables of parsed files it holds (name -> (body, stamp))
    and its catalog as `_catalog` read it after they were made."""

    db: duckdb.DuckDBPyConnection
    views: dict[str, tuple[str, str]] = field(default_factory=dict)
    tables: dict[str, tuple[str, str]] = field(default_factory=dict)
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
        # A worker process sets this: the leftover check of a database a call used (a catalog query, not
        # free) then waits for `settle`, which the worker runs once it has answered.
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


def _columns_of(con: duckdb.DuckDBPyConnection, sources: list[Source]) -> list[str]:
    names: list[str] = []
    for src in sources:
        try:
            names += [r[0] for r in con.execute(f"DESCRIBE {ident(src.name)}").fetchall()]
        except duckdb.Error:
            continue
    return names


# A single CSV file of at most this many bytes is parsed once per version into a table of the pooled
# database, which its views read: parsing it again was most of a small query's cost. A version is the
# file's size, modification time and a digest of its bytes (a file rewritten within one tick of the
# filesystem's clock, at the same size, is a new version too).
HELD_CSV_BYTES = 1024 * 1024


def _held_csv(src: Source, body: str) -> tuple[str, str] | None:
    """The table (name, stamp) that holds the parsed rows of `src` (view body `body`) when it is one
    small uncompressed CSV file; None otherwise (its views read the file)."""
    if src.fmt != "csv" or len(src.files) != 1 or src.pattern != str(src.files[0]):
        return None
    path = src.files[0]
    if path.name.lower().endswith((".gz", ".zst")):
        return None
    try:
        with path.open("rb") as fh:
            st = os.fstat(fh.fileno())
            if st.st_size > HELD_CSV_BYTES:
                return None
            data = fh.read(HELD_CSV_BYTES + 1)
    except OSError:
        return None  # the view's own statement reports it
    digest = hashlib.blake2b(data, digest_size=16).hexdigest()
    name = "_cairn_file_" + hashlib.blake2b(body.encode(), digest_size=8).hexdigest()
    return name, f"{len(data)}:{st.st_mtime_ns}:{digest}"


def _create_views(
    lease: Lease, sources: list[Source], result_views: dict[str, Path], sample_size: int | None = None
) -> None:
    # A view is made again when its files changed (it keeps the column types it was made with).
    wanted: dict[str, tuple[str, str]] = {}
    plain: dict[str, tuple[str, str]] = {}
    tables: dict[str, tuple[str, str]] = {}
    for src in sources:
        body = f"SELECT * FROM {src.bound_sql(lease.con, sample_size)}"
        plain[src.name] = wanted[src.name] = (body, str(fingerprint(src.files)))
        held = _held_csv(src, body)
        if held is not None:
            tables[held[0]] = (body, held[1])
            wanted[src.name] = (f"SELECT * FROM {ident(held[0])}", held[1])
    for name, path in result_views.items():
        plain[name] = wanted[name] = (f"SELECT * FROM read_parquet({lit(str(path))})", str(fingerprint([path])))
    try:
        lease.use_views(wanted, tables)
    except STATEMENT_ERRORS:
        if not tables:
            raise
        # A file that does not parse whole: each query reads it, and its error is the query's, as it
        # would be for a larger file.
        lease.use_views(plain)


_slots: dict[int, threading.BoundedSemaphore] = {}
_slots_lock = threading.Lock()


def _slot(limit: int) -> threading.BoundedSemaphore:
    with _slots_lock:
        if limit not in _slots:
            _slots[limit] = threading.BoundedSemaphore(max(1, limit))
        return _slots[limit]


def run_locked(
    cfg: EngineConfig,
    sources: list[Source],
    fn: Callable[[duckdb.DuckDBPyConnection], T],
    *,
    result_views: dict[str, Path] | None = None,
    sample_size: int | None = None,
    threads: int | None = None,
) -> T:
    """Lease a locked database from the pool, make views over `sources`, run `fn` under the watchdog.
    At most `concurrency` calls hold a database at once; the time limit counts from when a call gets
    one (in a worker process, from when the request came: `watchdog.time_left`). The database goes back
    to the pool only after a call that ended normally or with an error about its statement, and once
    its views are dropped (see `Lease`)."""
    with _slot(cfg.concurrency):
        known: list[str] = []
        try:
            check_width(sources, cfg.max_columns)
            with POOL.lease(cfg.lockdown(threads), keep=max(1, cfg.concurrency)) as lease:
                try:
                    _create_views(lease, sources, result_views or {}, sample_size)
                except duckdb.Error as exc:
                    if not isinstance(exc, STATEMENT_ERRORS):
                        lease.discard()
                    # The view is the server's statement: its error is about the file it reads.
                    raise translate(exc, [], source_names(sources), opening=True) from None
                con = lease.con
                try:
                    value, fired = run_with_timeout(con, time_left(cfg.timeout_s), lambda: fn(con))
                except (duckdb.BinderException, duckdb.CatalogException):
                    known = _columns_of(con, sources)
                    raise
                if fired:
                    lease.discard()
                return value
        except BaseException as exc:
            raise translate(exc, known, source_names(sources)) from None


def source_names(sources: list[Source]) -> dict[str, str]:
    """The paths (patterns and files) of `sources`, each mapped to the name of the first source that
    reads it (the dataset's own view, not an alias such as `data`)."""
    names: dict[str, str] = {}
    for src in sources:
        for path in (src.pattern, *map(str, src.files)):
            names.setdefault(path, src.name)
    return names


def warm(cfg: EngineConfig) -> None:
    """Open a locked database of `cfg`'s lockdown and run one statement on it, leaving it in the pool
    (a new worker process does this before it takes calls)."""
    run_locked(cfg, [], lambda con: con.execute("SELECT 1").fetchall())
