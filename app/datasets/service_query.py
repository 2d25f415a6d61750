"""execute_query: check the query, run it in a DuckDB worker (or the operator-enabled python engine) or
find its result in the cache, store the full result under a query_id, and answer within the budget
(`service_answer`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from app.core.context import CallContext
from app.core.errors import CairnError, NotFound
from app.datasets import engine, storage
from app.datasets import service_engines as engines
from app.datasets.config import DatasetSettings
from app.datasets.engine import polars_expr, pysandbox
from app.datasets.engine.cache import Cache, fingerprint, make_key, normalize_sql
from app.datasets.engine.sandbox import check_sql, context_in, resolve_path
from app.datasets.models import Dataset, DatasetQuery
from app.datasets.repository import QueryRepository
from app.datasets.schemas import QueryIn, QueryOut
from app.datasets.service_answer import Stored, answer, rows_shown
from app.datasets.service_common import (
    QUERY_ID,
    Space,
    cache_epoch,
    cache_of,
    engine_config,
    name_caller,
    portable_fingerprints,
    registered,
    sources_of,
    space_of,
    stored_file,
)
from app.datasets.service_results import cache_entry_written, publish, settled, store_later
from app.datasets.storage import FolderStore, Store, result_key

T = TypeVar("T")

# A stored result's first rows ride in its cache entry when their JSON weighs at most this: a repeated
# query is then answered without a DuckDB worker reading them back from the stored file.
HEAD_IN_ENTRY_BYTES = 16 * 1024

# A query whose input files weigh at most this much in all runs on one DuckDB thread.
SMALL_INPUT_BYTES = 4 * 1024 * 1024


async def execute_query(ctx: CallContext, args: QueryIn) -> QueryOut:
    """Run a query (or reuse a cached result), store the full result, answer within the budget. Every
    error carries a query_context: the place DuckDB (or the python engine) points at, else the name
    the message quotes, else the beginning of the query."""
    choice: engines.Choice | None = None
    names: list[str] = []
    try:
        choice = engines.choose(args, ctx.feature_settings(DatasetSettings).datasets_python_enabled)
        if choice.language == "polars_expr":
            compiled = polars_expr.compile_chain(args.query)
            names, sql = compiled.names, compiled.sql
        else:
            sql = args.query
        return await _execute_query(ctx, args, choice, sql, names)
    except CairnError as exc:
        if choice is not None and choice.language == "polars_expr":
            exc = engines.for_polars(exc, names)
        if exc.query_context is None:
            exc.query_context = context_in(args.query, exc.message)
        raise exc from None


async def _execute_query(
    ctx: CallContext, args: QueryIn, choice: engines.Choice, sql: str, names: list[str]
) -> QueryOut:
    cfg = ctx.feature_settings(DatasetSettings)
    space = await space_of(ctx, args.project)
    name_caller(ctx)
    refs = list(args.files)
    known = await registered(ctx, space, [r for r in refs + names if not QUERY_ID.fullmatch(r)])
    # A polars chain reading a registered dataset by its name (`pl.scan_csv('orders')`) gets its view.
    refs += [n for n in dict.fromkeys(names) if n in known and n not in refs]
    if choice.engine == "python":
        sources, _, taken = await asyncio.to_thread(sources_of, refs, known, space.roots, space.store, space.project)
        return await _run_python(ctx, cfg, space, args, sources, sorted(taken), choice)
    return await _run_sql(ctx, cfg, space, args, sql, refs, known, choice)


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """What one thread hop finds before a SQL query runs: its views, every view name taken, the query
    checked and normalized, the stored results it names (and the files of those present), the
    fingerprints of every file it reads, its cache key and its cache entry, if any."""

    sources: list[engine.Source]
    taken: set[str]
    checked: str
    normalized: str
    result_ids: list[str]
    result_views: dict[str, Path]
    fingerprints: list[list[Any]]
    key: str
    hit: dict[str, Any] | None


def _prepare(
    sql: str,
    refs: list[str],
    known: dict[str, Dataset],
    space: Space,
    named: dict[str, DatasetQuery],
    cache: Cache,
    max_rows: int,
    epoch: int | concurrent.futures.Future[int] = 0,
) -> _Prepared:
    """Find the files (fetching objects of a remote store), check the query and look its result up in
    the cache under the project's cache `epoch` (waited for here when it is a future: it is read from
    the database while the files are found). Looks at the filesystem."""
    rts = space.roots
    sources, result_ids, taken = sources_of(refs, known, rts, space.store, space.project)
    checked, literal_files = _checked_sql(sql, rts)
    ids = result_ids + [q for q in QUERY_ID.findall(checked) if q not in result_ids]
    present: dict[str, Path] = {}
    for q in ids:
        local = stored_file(space, named[q].result_path) if q in named else None
        if local is not None:
            present[q] = local
    all_files = [f for s in sources for f in s.files] + literal_files + list(present.values())
    fps = portable_fingerprints(space, fingerprint(all_files))
    norm = normalize_sql(checked)
    key = make_key(
        "query",
        project=space.project,
        sql=norm,
        views={s.name: space.store.portable(s.sql()) for s in sources},
        results=sorted(ids),
        files=fps,
        max_rows=max_rows,
    )
    if isinstance(epoch, concurrent.futures.Future):
        epoch = epoch.result()
    hit = cache.get(key, epoch) if len(present) == len(ids) else None
    return _Prepared(sources, taken, checked, norm, ids, present, fps, key, _with_file(space, cache, key, hit))


async def _run_sql(
    ctx: CallContext,
    cfg: DatasetSettings,
    space: Space,
    args: QueryIn,
    sql: str,
    refs: list[str],
    known: dict[str, Dataset],
    choice: engines.Choice,
) -> QueryOut:
    """A SQL query (or a compiled polars expression): its result from the cache or from a worker."""
    queries = QueryRepository(ctx.session, space.project)
    # Stored results the query may name (a superset: the text before it is checked), read before the
    # one thread hop that finds the files, checks the query and looks its result up in the cache.
    named = await queries.get_many(
        list(dict.fromkeys([r for r in refs if QUERY_ID.fullmatch(r)] + QUERY_ID.findall(sql)))
    )
    for q in named.values():
        await settled(space, q.query_id, q.result_path, q.created_at)
    cache = cache_of(ctx, space)
    look = functools.partial(_prepare, sql, refs, known, space, named, cache, cfg.datasets_result_max_rows)
    epoch, p = await _prepared_beside_epoch(ctx, space, look)
    if p.hit is None and await cache_entry_written(p.key):
        # The same query was answered moments ago and its entry is now written: look again.
        p = await asyncio.to_thread(look, epoch)
    missing = [q for q in p.result_ids if q not in named]
    if missing:
        raise NotFound(f"Unknown query_id {missing[0]}", suggestions=["Run execute_query to get a query_id"])
    gone = [q for q in p.result_ids if q not in p.result_views]
    if gone:  # stored before results were kept per project
        raise NotFound(f"The stored result {gone[0]} is gone", suggestions=["Run its query again"])
    ecfg = engine_config(cfg, space, args.timeout_ms)
    if p.fingerprints and sum(max(0, int(f[1])) for f in p.fingerprints) <= SMALL_INPUT_BYTES:
        # DuckDB's second thread costs a small query more CPU and wall time than it saves: a database
        # with one thread serves it.
        ecfg = dataclasses.replace(ecfg, threads=1)
    head: list[dict[str, Any]] | None = None
    later: asyncio.Future[Any] | None = None  # the stored file's write, when it ends after the answer
    pending: list[Any] = []
    if p.hit is not None:
        meta, cache_hit = p.hit["meta"], True
        head = _cached_head(p.hit, rows_shown(args))
    else:
        meta, head, later = await _store(cfg, ecfg, args, p)
        cache_hit = False
        key = result_key(space.project, meta["query_id"])
        # A partial result is not cached: the next call runs the query again (with more time, maybe).
        remember: Callable[[], Any] = functools.partial(
            _remember,
            cache,
            p.key,
            _cache_entry({**meta, "result_path": key}, p.fingerprints, args, space),
            cfg.datasets_result_ttl_seconds,
            Path(meta["result_path"]),
            epoch,
            space.store,
            head,
        )
        if "partial" in meta:
            remember = _forget
        publishing = functools.partial(publish, space, key, Path(meta["result_path"]))
        if later is None:
            # The result goes to the store, then its cache entry, while the database records the result.
            pending.append(asyncio.to_thread(lambda: (publishing(), remember())))
        else:
            store_later(meta["query_id"], later, remember, publishing, p.key)
    row = _result_row(ctx, meta, p.checked[:100_000], p.fingerprints, p.key, args)
    pending.append(queries.save({**row, "result_path": result_key(space.project, meta["query_id"])}))
    await asyncio.gather(*pending)
    # Reading the stored result back runs under the server's time limit, not the query's own.
    reader = dataclasses.replace(ecfg, timeout_s=cfg.datasets_query_timeout_ms / 1000.0)
    reason = engines.with_inputs(choice, len(p.fingerprints), sum(max(0, int(f[1])) for f in p.fingerprints))
    stored = Stored({**meta, "engine_reason": reason}, cache_hit, choice.engine, p.normalized, sorted(p.taken))
    return await answer(cfg, args, stored, reader, head, later)


async def _prepared_beside_epoch(
    ctx: CallContext, space: Space, look: Callable[[concurrent.futures.Future[int]], T]
) -> tuple[int, T]:
    """The project's cache epoch and `look`'s preparation, the epoch read from the database while the
    thread finds the files and checks the query (the thread waits for it only for the cache lookup)."""
    box: concurrent.futures.Future[int] = concurrent.futures.Future()
    hop = asyncio.ensure_future(asyncio.to_thread(look, box))
    try:
        epoch = await cache_epoch(ctx, space)
    except BaseException as exc:
        box.set_exception(exc if isinstance(exc, Exception) else asyncio.CancelledError())
        with contextlib.suppress(BaseException):
            await hop
        raise
    box.set_result(epoch)
    return epoch, await hop


async def _store(
    cfg: DatasetSettings, ecfg: engine.EngineConfig, args: QueryIn, p: _Prepared
) -> tuple[dict[str, Any], list[dict[str, Any]] | None, asyncio.Future[Any] | None]:
    """Run the query in a worker, which stores its result under a new query_id: the result's metadata,
    the rows the answer may show (None when it shows none) and the file's write when it ends after the
    answer (`sandbox.answer_early`)."""
    query_id = "q_" + uuid.uuid4().hex[:16]
    dest = ecfg.results / f"{query_id}.parquet"
    shown = rows_shown(args)
    res, later = await engine.offload_staged(
        engine.execute_to_store,
        ecfg,
        p.checked,
        p.sources,
        p.result_views,
        dest,
        cfg.datasets_result_max_rows,
        shown,
    )
    meta = {
        "query_id": query_id,
        "result_path": str(res.path),
        "columns": res.columns,
        "types": res.types,
        "rows_stored": res.rows_stored,
        "rows_total": res.rows_total,
        "elapsed_ms": res.elapsed_ms,
    }
    if res.extra.get("partial"):  # out of time: the rows it produced before (`engine.partial`)
        meta["partial"] = res.extra["partial"]
    return meta, (res.head if shown else None), later


def _checked_sql(sql: str, rts: list[Path]) -> tuple[str, list[Path]]:
    """`check_sql`, and the files its path literals match."""
    checked, patterns = check_sql(sql, rts)
    files: list[Path] = []
    for pattern in patterns:
        files += resolve_path(pattern, rts)[1]
    return checked, files


def _cache_entry(meta: dict[str, Any], fps: list[list[Any]], args: QueryIn, space: Space) -> dict[str, Any]:
    """The cache entry of a stored result: its metadata, the files it read and how callers name it."""
    return {
        "meta": meta,
        "files": fps,
        "label": args.cache_key,
        "text": text_of(args.query),
        "result_path": meta["result_path"],
        "project": space.project,
    }


def _with_head(entry: dict[str, Any], head: list[dict[str, Any]] | None) -> dict[str, Any]:
    """`entry` holding the first rows of its result when their JSON weighs at most
    `HEAD_IN_ENTRY_BYTES` (measured row by row, so a heavy head is not encoded whole). Blocks."""
    if not head:
        return entry
    weight = 0
    for row in head:
        weight += len(json.dumps(row, default=str))
        if weight > HEAD_IN_ENTRY_BYTES:
            return entry
    return {**entry, "head": head}


def _cached_head(hit: dict[str, Any], shown: int) -> list[dict[str, Any]] | None:
    """The rows a cache hit's answer shows, from its entry when the entry holds at least that many
    (rendered as `read_rows` renders the stored file's: `engine.execute_to_store`); else None, and
    they are read from the stored file."""
    rows = hit.get("head")
    want = min(shown, int(hit["meta"]["rows_stored"]))
    if not shown or not isinstance(rows, list) or len(rows) < want:
        return None
    return rows


def _result_row(
    ctx: CallContext, meta: dict[str, Any], sql: str, fps: list[list[Any]], key: str, args: QueryIn
) -> dict[str, Any]:
    """The `dataset_queries` row of a stored result whose query text is `sql`."""
    return {
        "query_id": meta["query_id"],
        "sql": sql,
        "files": [f[0] for f in fps],
        "columns": [[c, t] for c, t in zip(meta["columns"], meta["types"], strict=False)],
        "rows_stored": meta["rows_stored"],
        "rows_total": meta["rows_total"],
        "result_path": meta["result_path"],
        "cache_key": key[:64],
        "label": args.cache_key,
        "created_by": ctx.principal.key_id,
    }


def text_of(query: str) -> str:
    """A query's text as a cache entry names it: whitespace collapsed, at most 200 characters."""
    return " ".join(query.split())[:200]


def _remember(
    cache: Cache,
    key: str,
    entry: dict[str, Any],
    result_ttl: float,
    stored: Path,
    epoch: int,
    store: Store,
    head: list[dict[str, Any]] | None = None,
) -> None:
    """Cache a new result's entry (with its `head` rows when they are light), and sweep the result
    store when that is due (a remote store's results too, when this host's local store was swept)."""
    cache.put(key, _with_head(entry, head), epoch)
    before = cache.swept_at
    cache.sweep_if_due(result_ttl, stored)
    if cache.swept_at != before and not isinstance(store, FolderStore):
        storage.sweep(store, "results/", result_ttl, cache.max_bytes)


def _forget() -> None:
    """What is remembered of a partial result: nothing."""


def _with_file(space: Space, cache: Cache, key: str, hit: dict[str, Any] | None) -> dict[str, Any] | None:
    """A cache hit with the local file of its stored result (fetched from a remote store when this host
    has no copy yet); None, and the entry dropped, when the result is gone. Blocks."""
    if hit is None or "result_path" not in hit["meta"]:
        return hit
    local = stored_file(space, str(hit["meta"]["result_path"]))
    if local is None:
        cache.remove([key])
        return None
    return {**hit, "meta": {**hit["meta"], "result_path": str(local)}}


async def _run_python(
    ctx: CallContext,
    cfg: DatasetSettings,
    space: Space,
    args: QueryIn,
    sources: list[engine.Source],
    views: list[str],
    choice: engines.Choice,
) -> QueryOut:
    """The operator-enabled python engine: a limited child process writes the stored result."""
    named = pysandbox.files_named(args.query, space.roots)
    read = [f for s in sources for f in s.files] + named
    fps = portable_fingerprints(space, await asyncio.to_thread(fingerprint, read))
    defs = {s.name: space.store.portable(s.sql()) for s in sources}
    key = make_key("python", project=space.project, code=args.query, views=defs, files=fps)
    cache = cache_of(ctx, space)
    epoch = await cache_epoch(ctx, space)
    hit = await asyncio.to_thread(lambda: _with_file(space, cache, key, cache.get(key, epoch)))
    if hit is not None:
        meta, cache_hit = hit["meta"], True
    else:
        ecfg = engine_config(cfg, space, args.timeout_ms)
        query_id = "q_" + uuid.uuid4().hex[:16]
        dest = ecfg.results / f"{query_id}.parquet"
        started = asyncio.get_running_loop().time()
        await asyncio.to_thread(
            pysandbox.run_python,
            ecfg,
            args.query,
            sources,
            dest,
            cpu_seconds=cfg.datasets_python_cpu_seconds,
            memory_mb=cfg.datasets_python_memory_mb,
            max_file_bytes=cfg.datasets_cache_max_bytes,
        )
        columns, types, count = await asyncio.to_thread(pysandbox.describe_result, dest)
        meta = {
            "query_id": query_id,
            "result_path": str(dest),
            "columns": columns,
            "types": types,
            "rows_stored": count,
            "rows_total": count,
            "elapsed_ms": int((asyncio.get_running_loop().time() - started) * 1000),
        }
        cache_hit = False
        stored = result_key(space.project, query_id)
        await asyncio.to_thread(publish, space, stored, dest)
        await asyncio.to_thread(cache.put, key, _cache_entry({**meta, "result_path": stored}, fps, args, space), epoch)
    row = _result_row(ctx, meta, "-- python\n" + args.query[:100_000], fps, key, args)
    await QueryRepository(ctx.session, space.project).save(
        {**row, "result_path": result_key(space.project, meta["query_id"])}
    )
    reason = engines.with_inputs(choice, len(fps), sum(max(0, int(f[1])) for f in fps))
    stored_result = Stored({**meta, "engine_reason": reason}, cache_hit, "python", "", views)
    return await answer(cfg, args, stored_result, engine_config(cfg, space))
