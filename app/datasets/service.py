"""Use cases of the datasets feature. DuckDB work runs in worker threads, each on a pooled locked
database leased for that call (see `sandbox`)."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import dataclasses
import datetime
import io
import json
import logging
import os
import re
import stat
import statistics
import time
import uuid
from collections.abc import Awaitable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal, Protocol

from cachetools import TTLCache
from pydantic import ValidationError

from app.core import budget
from app.core.context import CallContext
from app.core.errors import (
    CairnError,
    Conflict,
    EngineError,
    InvalidInput,
    NotFound,
    invalid_field,
    validation_error,
)
from app.core.schemas import PROJECT_NAME
from app.datasets import engine
from app.datasets.config import data_roots, get_dataset_settings, projects_dir, work_dir
from app.datasets.engine import exporting, polars_expr, profiling, pysandbox
from app.datasets.engine.cache import Cache, describe, fingerprint, get_cache, make_key, normalize_sql
from app.datasets.engine.sandbox import DATA_EXTENSIONS, check_sql, context_in, file_format, inside, resolve_path
from app.datasets.models import Dataset
from app.datasets.repository import DatasetRepository, QueryRepository
from app.datasets.schemas import (
    DATASET_NAME,
    DatasetOut,
    ExportIn,
    ExportOut,
    FileOut,
    InvalidateIn,
    InvalidateOut,
    ListDatasetsIn,
    ListDatasetsOut,
    ProfileIn,
    ProfileOut,
    ProfileSchema,
    ProfileStatistics,
    QueryIn,
    QueryOut,
    QuerySummary,
    RegisterIn,
    RegisterOut,
    ResultPageIn,
    ResultPageOut,
    SampleIn,
    SampleOut,
    SamplingInfo,
    UploadForm,
    UploadIn,
    UploadOut,
    Visualization,
)

log = logging.getLogger("cairn.datasets")
QUERY_ID = re.compile(r"\bq_[0-9a-f]{16}\b")
_NAME_RE = re.compile(DATASET_NAME)
MAX_LISTED_FILES = 200
MAX_LISTED_ENTRIES = 50  # cache entries named in a cache_invalidate reply


_PROJECT_RE = re.compile(PROJECT_NAME)


@dataclasses.dataclass(frozen=True)
class Space:
    """What one call may touch: its project's private folder (read and written: uploads, exports), the
    operator's shared data roots (read only) and the project's own result store and spill folder."""

    project: str
    folder: Path
    shared: list[Path]
    work: Path

    @property
    def roots(self) -> list[Path]:
        """The readable folders, searched in this order for a relative path: own folder first."""
        return [self.folder, *self.shared]


def _make_space(data_dir: Path, project: str) -> Space:
    shared = data_roots(data_dir)
    base = projects_dir(data_dir)
    work = work_dir(data_dir)
    for private, setting in ((base, "CAIRN_DATASETS_PROJECTS_DIR"), (work, "CAIRN_DATASETS_WORK_DIR")):
        # A private area inside a shared root (or holding one) would be readable by every project.
        if any(inside(private, [r]) or inside(r, [private]) for r in shared):
            raise EngineError(
                f"The datasets storage is misconfigured: {setting} overlaps a data root",
                suggestions=[f"The operator must move {setting} outside CAIRN_DATA_ROOTS"],
            )
    folder = base / project
    mine = work / "projects" / project
    for path in (folder, mine / "results", mine / "tmp"):
        path.mkdir(parents=True, exist_ok=True)
    for path in (folder, mine):
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise EngineError("The datasets storage is misconfigured: a project folder is a symbolic link")
    return Space(project=project, folder=folder, shared=shared, work=mine)


# Spaces made (folders created and checked) in the last few seconds, by data directory, project and
# the settings that place the folders: most calls then need no filesystem work (nor a thread) for it.
_SPACES: TTLCache[tuple[Any, ...], Space] = TTLCache(maxsize=256, ttl=10)


def _still_there(space: Space) -> bool:
    """True while a remembered space's folders exist (folders removed meanwhile are made again). Two
    stats of local folders, run on the event loop: microseconds, against a thread hop's fraction of a
    millisecond."""
    return os.path.isdir(space.work / "results") and os.path.isdir(space.folder)


async def space_of(ctx: CallContext, requested: str | None) -> Space:
    """The caller's space: the effective project (`ctx.project`: a bound key keeps to its own) and its
    folders, created if missing."""
    project = ctx.project(requested)
    if not _PROJECT_RE.fullmatch(project):
        raise InvalidInput(f"Invalid project name {project[:80]!r}")
    engine.set_caller(ctx.principal.key_id or ctx.principal.name)  # whose share of the DuckDB slots
    cfg = get_dataset_settings()
    key = (
        ctx.settings.data_dir,
        project,
        tuple(str(r) for r in cfg.data_roots),
        cfg.datasets_projects_dir,
        cfg.datasets_work_dir,
    )
    space = _SPACES.get(key)
    if space is None or not _still_there(space):
        space = await asyncio.to_thread(_make_space, ctx.settings.data_dir, project)
        _SPACES[key] = space
    return space


def config(space: Space, timeout_ms: int | None = None) -> engine.EngineConfig:
    """Engine limits from the settings (a call may only lower the time limit), reading the space's
    roots and storing results in its own store."""
    cfg = get_dataset_settings()
    limit = cfg.datasets_query_timeout_ms if timeout_ms is None else min(timeout_ms, cfg.datasets_query_timeout_ms)
    return engine.EngineConfig(
        roots=space.roots,
        work=space.work,
        memory_limit=cfg.datasets_memory_limit,
        threads=cfg.datasets_threads,
        timeout_s=limit / 1000.0,
        concurrency=cfg.datasets_max_concurrency,
    )


def cache_of(ctx: CallContext) -> Cache:
    """The process cache of this server's work directory (its folders made again if removed)."""
    cfg = get_dataset_settings()
    key = (ctx.settings.data_dir, cfg.datasets_work_dir)
    cache = _CACHES.get(key)
    # Two stats on the event loop rather than `work_dir`'s three mkdirs and a resolve on every call.
    if cache is None or not (os.path.isdir(cache.dir) and os.path.isdir(cache.results)):
        cache = get_cache(
            work_dir(ctx.settings.data_dir),
            cfg.datasets_cache_ttl_seconds,
            cfg.datasets_cache_max_bytes,
            cfg.datasets_cache_memory_entries,
        )
        _CACHES[key] = cache
    return cache


_CACHES: TTLCache[tuple[Any, ...], Cache] = TTLCache(maxsize=16, ttl=10)


@contextlib.contextmanager
def storage_errors() -> Iterator[None]:
    """Turn a filesystem failure escaping a datasets call into its own error: the executor would take
    an OSError for a lost database connection."""
    try:
        yield
    except OSError as exc:
        raise exporting.storage_error(exc, "the datasets folders") from None


def budget_of(requested: int | None) -> int:
    """The effective token budget of a call."""
    cfg = get_dataset_settings()
    return min(requested or cfg.datasets_max_tokens, cfg.datasets_max_tokens_cap)


def dataset_out(d: Dataset) -> DatasetOut:
    """API view of a registry row."""
    return DatasetOut(
        name=d.name,
        path=d.path,
        format=d.format,
        size_bytes=d.size_bytes,
        description=d.description,
        source=d.source,
        created_at=d.created_at,
    )


def _view_name(text: str, taken: set[str]) -> str:
    stem = Path(text).name
    for suffix in (".gz", ".zst"):
        stem = stem.removesuffix(suffix)
    stem = stem.rsplit(".", 1)[0] if "." in stem else stem
    base = re.sub(r"[^A-Za-z0-9_]", "_", stem).strip("_") or "data"
    if base[0].isdigit():
        base = "t_" + base
    name, i = base.lower(), 2
    while name in taken:
        name = f"{base.lower()}_{i}"
        i += 1
    return name


def _is_name(ref: str) -> bool:
    """True when `ref` may name a registered dataset (else it is a path or a glob)."""
    return bool(_NAME_RE.fullmatch(ref)) and not any(ch in ref for ch in "./*")


async def _registered(ctx: CallContext, space: Space, refs: list[str]) -> dict[str, Dataset]:
    """The datasets of the space's project that `refs` name (one query)."""
    names = [r for r in refs if _is_name(r)]
    return await DatasetRepository(ctx.session, space.project).get_many(names) if names else {}


def _source_of(ref: str, registered: dict[str, Dataset], rts: list[Path], taken: set[str]) -> engine.Source:
    """`ref` as a Source: the registered dataset it names, else a path/glob inside the roots `rts`; its
    view is named apart from the names `taken`. Looks at the filesystem."""
    ds = registered.get(ref) if _is_name(ref) else None
    if ds is not None:
        pattern, files = resolve_path(ds.path, rts)
        name = ref.lower() if ref.lower() not in taken else _view_name(ref, taken)
        return engine.make_source(name, pattern, files)
    pattern, files = resolve_path(ref, rts)
    return engine.make_source(_view_name(ref, taken), pattern, files)


async def resolve_source(ctx: CallContext, space: Space, ref: str, taken: set[str] | None = None) -> engine.Source:
    """A dataset name registered in the space's project, or a path/glob inside its readable roots, as a
    Source."""
    registered = await _registered(ctx, space, [ref])
    return await asyncio.to_thread(_source_of, ref, registered, space.roots, taken if taken is not None else set())


def _sources_of(
    refs: list[str], registered: dict[str, Dataset], rts: list[Path]
) -> tuple[list[engine.Source], list[str], set[str]]:
    """The sources `refs` (execute_query's `files`) name, in order, the stored results they name, and
    every view name taken. A single source is also the view `data`. Looks at the filesystem."""
    sources: list[engine.Source] = []
    taken: set[str] = set()
    result_ids: list[str] = []
    for ref in refs:
        if QUERY_ID.fullmatch(ref):
            result_ids.append(ref)
            taken.add(ref)
            continue
        src = _source_of(ref, registered, rts, taken)
        taken.add(src.name)
        sources.append(src)
    if len(sources) == 1 and "data" not in taken:
        first = sources[0]
        sources.append(engine.Source(name="data", pattern=first.pattern, files=first.files, fmt=first.fmt))
        taken.add("data")
    return sources, result_ids, taken


# ------------------------------------------------------------------------------------------------ profile


async def profile_dataset(ctx: CallContext, args: ProfileIn) -> ProfileOut:
    """Profile one dataset (cached by file fingerprint and options). The cached profile is the full
    one: `detail` only shapes the reply, so it is not part of the key and either detail of one profile
    is answered from the same entry."""
    space = await space_of(ctx, args.project)
    src = await resolve_source(ctx, space, args.file_path)
    cache = cache_of(ctx)
    key = make_key(
        "profile",
        project=space.project,
        pattern=src.pattern,
        files=fingerprint(src.files),
        sample=args.sample_size,
        stats=args.compute_stats,
        cats=args.max_categories,
    )
    hit = await asyncio.to_thread(cache.get, key)
    if hit is not None:
        raw, cache_hit = hit["payload"], True
    else:
        raw = await engine.offload(
            profiling.profile,
            config(space),
            src,
            sample_size=args.sample_size,
            compute_stats=args.compute_stats,
            max_categories=args.max_categories,
        )
        cache_hit = False
        entry = {
            "payload": raw,
            "files": fingerprint(src.files),
            "label": f"profile:{src.pattern}",
            "text": args.file_path,
            "project": space.project,
        }
        await asyncio.to_thread(cache.put, key, entry)
    return await asyncio.to_thread(_fit_profile, raw, args, src, cache_hit)


def _fit_profile(raw: dict[str, Any], args: ProfileIn, src: engine.Source, cache_hit: bool) -> ProfileOut:
    """The reply of a full profile `raw` in `args.detail`, within the token budget. Ladder: top-value
    lists cut to 5 (full), then column statistics dropped, then sample values cut to one, then whole
    columns (`columns_omitted`), then recommendations; each step sets `truncated`. A budget too small
    for even the statistics is refused (4001) with the least that fits."""
    limit = budget_of(args.max_tokens)
    full = args.detail == "full"
    columns: list[dict[str, Any]] = [dict(c) for c in raw["schema"]["columns"]]
    recommendations: list[str] = list(raw["recommendations"])

    def build(cols: list[dict[str, Any]], omitted: int, truncated: bool, recs: list[str]) -> dict[str, Any]:
        schema: dict[str, Any] = {"columns": cols, "columns_omitted": omitted}
        if not full:
            lines = [profiling.summary_line(c) for c in cols]
            schema["columns"] = [profiling.summary_header(), *lines] if lines else []
        out = ProfileOut(
            schema=ProfileSchema.model_validate(schema),
            statistics=ProfileStatistics.model_validate(raw["statistics"]),
            recommendations=recs,
            context_tokens_used=0,
            file_path=src.pattern,
            format=raw["format"],
            files=raw["files"],
            cache_hit=cache_hit,
            truncated=truncated,
        )
        return budget.finalize(out.model_dump(mode="json", by_alias=True))

    payload = build(columns, 0, False, recommendations)
    if payload["context_tokens_used"] <= limit:
        return ProfileOut.model_validate(payload)
    steps = ("top5", "nostats", "novalues") if full else ("nostats", "novalues")
    for step in steps:
        for c in columns:
            if step == "top5" and c.get("stats") and "top_values" in c["stats"]:
                st = c["stats"]
                kept, cut = st["top_values"][:5], st["top_values"][5:]
                c["stats"] = {
                    **st,
                    "top_values": kept,
                    "other_values": int(st.get("other_values") or 0) + len(cut),
                    "other_rows": int(st.get("other_rows") or 0) + sum(n for _, n in cut),
                }
            elif step == "nostats":
                c["stats"] = None
            elif step == "novalues":
                c["sample_values"] = c["sample_values"][:1]
        payload = build(columns, 0, True, recommendations)
        if payload["context_tokens_used"] <= limit:
            return ProfileOut.model_validate(payload)
    k = budget.largest_fitting(
        len(columns),
        lambda m: build(columns[:m], len(columns) - m, True, recommendations)["context_tokens_used"] <= limit,
    )
    if k == 0:
        r = budget.largest_fitting(
            len(recommendations),
            lambda m: build([], len(columns), True, recommendations[:m])["context_tokens_used"] <= limit,
        )
        recommendations = recommendations[:r]
    payload = build(columns[:k], len(columns) - k, True, recommendations)
    if payload["context_tokens_used"] > limit:
        # Not even the statistics and the file fit: refused rather than answered over the budget (the
        # profile is cached, so asking again with a larger max_tokens costs no second pass).
        least = payload["context_tokens_used"]
        raise invalid_field(
            "max_tokens",
            f"max_tokens {limit} is below the smallest profile of this dataset ({least} tokens)",
            rule="too_small",
            suggestions=[f"Pass max_tokens of at least {least}"],
        )
    return ProfileOut.model_validate(payload)


# ------------------------------------------------------------------------------------------------ query


async def execute_query(ctx: CallContext, args: QueryIn) -> QueryOut:
    """Run a query (or reuse a cached result), store the full result, answer within the budget. Every
    error carries a query_context: the place DuckDB (or the python engine) points at, else the name
    the message quotes, else the beginning of the query."""
    try:
        return await _execute_query(ctx, args)
    except CairnError as exc:
        if exc.query_context is None:
            exc.query_context = context_in(args.query, exc.message)
        raise


async def _execute_query(ctx: CallContext, args: QueryIn) -> QueryOut:
    cfg = get_dataset_settings()
    engine_used = _pick_engine(args, cfg.datasets_python_enabled)
    sql = args.query
    if args.query_type == "polars_expr":
        sql = polars_expr.compile_expr(args.query)
    space = await space_of(ctx, args.project)
    rts = space.roots
    refs = list(args.files)
    registered = await _registered(ctx, space, [r for r in refs if not QUERY_ID.fullmatch(r)])
    if engine_used == "python":
        sources, _, taken = await asyncio.to_thread(_sources_of, refs, registered, rts)
        return await _run_python(ctx, space, args, sources, sorted(taken))
    queries = QueryRepository(ctx.session, space.project)
    # Stored results the query may name (a superset: the text before it is checked), read before the
    # one thread hop that finds the files, checks the query and looks its result up in the cache.
    named = await queries.get_many(
        list(dict.fromkeys([r for r in refs if QUERY_ID.fullmatch(r)] + QUERY_ID.findall(sql)))
    )
    for q in named.values():
        await _settled(q.query_id, Path(q.result_path), q.created_at)
    cache = cache_of(ctx)
    results_dir = space.work / "results"

    def prepare() -> tuple[
        list[engine.Source], set[str], str, str, list[str], dict[str, Path], list[list[Any]], str, dict[str, Any] | None
    ]:
        sources, result_ids, taken = _sources_of(refs, registered, rts)
        checked, literal_files = _checked_sql(sql, rts)
        ids = result_ids + [q for q in QUERY_ID.findall(checked) if q not in result_ids]
        present = {
            q: Path(named[q].result_path)
            for q in ids
            if q in named and inside(Path(named[q].result_path), [results_dir])
        }
        all_files = [f for s in sources for f in s.files] + literal_files + list(present.values())
        fps = fingerprint(all_files)
        norm = normalize_sql(checked)
        key = make_key(
            "query",
            project=space.project,
            sql=norm,
            views={s.name: s.sql() for s in sources},
            results=sorted(ids),
            files=fps,
            max_rows=cfg.datasets_result_max_rows,
        )
        hit = cache.get(key) if len(present) == len(ids) else None
        return sources, taken, checked, norm, ids, present, fps, key, hit

    sources, taken, checked, norm, result_ids, result_views, fps, key, hit = await asyncio.to_thread(prepare)
    missing = [q for q in result_ids if q not in named]
    if missing:
        raise NotFound(f"Unknown query_id {missing[0]}", suggestions=["Run execute_query to get a query_id"])
    gone = [q for q in result_ids if q not in result_views]
    if gone:  # stored before results were kept per project
        raise NotFound(f"The stored result {gone[0]} is gone", suggestions=["Run its query again"])
    ecfg = config(space, args.timeout_ms)
    if fps and sum(max(0, int(f[1])) for f in fps) <= SMALL_INPUT_BYTES:
        # DuckDB's second thread costs a small query more than it gains (0.9 ms of CPU, 0.6 ms of wall time
        # for a count over a 1,000-row CSV); a database with one thread serves it.
        ecfg = dataclasses.replace(ecfg, threads=1)
    head: list[dict[str, Any]] | None = None
    later: asyncio.Future[Any] | None = None  # the stored file's write, when it ends after the answer
    pending: list[Awaitable[Any]] = []
    if hit is not None:
        meta, cache_hit = hit["meta"], True
    else:
        query_id = "q_" + uuid.uuid4().hex[:16]
        dest = ecfg.results / f"{query_id}.parquet"
        shown = _rows_shown(args)
        res, later = await engine.offload_staged(
            engine.execute_to_store, ecfg, checked, sources, result_views, dest, cfg.datasets_result_max_rows, shown
        )
        head = res.head if shown else None
        meta = {
            "query_id": query_id,
            "result_path": str(res.path),
            "columns": res.columns,
            "types": res.types,
            "rows_stored": res.rows_stored,
            "rows_total": res.rows_total,
            "elapsed_ms": res.elapsed_ms,
        }
        cache_hit = False
        entry = _cache_entry(meta, fps, args, space)
        remember = (cache, key, entry, cfg.datasets_result_ttl_seconds, res.path)
        if later is None:
            # The cache entry is written while the database records the result.
            pending.append(asyncio.to_thread(_remember, *remember))
        else:
            _store_later(query_id, later, remember)
    pending.append(queries.save(_result_row(ctx, meta, checked[:100_000], fps, key, args)))
    await asyncio.gather(*pending)
    # Reading the stored result back runs under the server's time limit, not the query's own.
    reader = dataclasses.replace(ecfg, timeout_s=cfg.datasets_query_timeout_ms / 1000.0)
    return await _answer(args, meta, cache_hit, engine_used, norm, sorted(taken), reader, head, later)


# A query whose input files weigh at most this much in all runs on one DuckDB thread.
SMALL_INPUT_BYTES = 4 * 1024 * 1024

# An answer of at most this many rows is first counted on the event loop (see `_answer`).
FEW_ROWS = 20

# Results answered before their file was in place (`engine.execute_to_store`'s early answer), by
# query_id, until the file is: whoever reads one of them in this process waits for it (`_settled`).
_WRITING: dict[str, asyncio.Future[Any]] = {}
# How long a reader waits for the file of a result another server process has just answered with.
SETTLE_S = 5.0


def _store_later(query_id: str, later: asyncio.Future[Any], remember: tuple[Any, ...]) -> None:
    """Track the file of a result answered early: readers wait for it, and its cache entry is written
    once it is in place (an entry whose file is missing counts as a miss)."""
    _WRITING[query_id] = later

    def written(done: asyncio.Future[Any]) -> None:
        _WRITING.pop(query_id, None)
        if done.cancelled() or done.exception() is not None:
            log.warning("the result %s was answered but its file was not written: %s", query_id, done.exception())
            return
        cached = asyncio.get_running_loop().run_in_executor(None, _remember, *remember)
        cached.add_done_callback(_cache_written)

    later.add_done_callback(written)


def _cache_written(done: asyncio.Future[Any]) -> None:
    """Log a cache entry that could not be written after its result's file was (a later call misses)."""
    if not done.cancelled() and done.exception() is not None:
        log.warning("a cache entry was not written: %s", done.exception())


async def _written(writing: asyncio.Future[Any]) -> None:
    """Wait for a stored result's write to end, however it ends (a reader of a missing file says so)."""
    with contextlib.suppress(Exception):
        await asyncio.shield(writing)


async def _settled(query_id: str, path: Path, created_at: Any) -> None:
    """Return once the file of the stored result `query_id` is in place, or once it will not be: one
    this process answered early is awaited; one answered moments ago by another process is looked for
    until SETTLE_S after it was recorded."""
    later = _WRITING.get(query_id)
    if later is not None:
        await _written(later)
        return
    if not isinstance(created_at, datetime.datetime):
        return
    until = created_at.timestamp() + SETTLE_S
    # Written by another process: there is nothing to wait on but the file itself.
    while not await asyncio.to_thread(path.is_file) and time.time() < until:  # noqa: ASYNC110
        await asyncio.sleep(0.01)


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
        "text": _text_of(args.query),
        "result_path": meta["result_path"],
        "project": space.project,
    }


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


def _text_of(query: str) -> str:
    """A query's text as a cache entry names it: whitespace collapsed, at most 200 characters."""
    return " ".join(query.split())[:200]


def _remember(cache: Cache, key: str, entry: dict[str, Any], result_ttl: float, stored: Path) -> None:
    """Cache a new result's entry, and sweep the result store when that is due."""
    cache.put(key, entry)
    cache.sweep_if_due(result_ttl, stored)


def _rows_shown(args: QueryIn) -> int:
    """How many leading rows of the result the answer may show."""
    return 0 if args.return_format in ("summary", "chart") else args.return_limit


async def _run_python(
    ctx: CallContext, space: Space, args: QueryIn, sources: list[engine.Source], views: list[str]
) -> QueryOut:
    """The operator-enabled python engine: a limited child process writes the stored result."""
    cfg = get_dataset_settings()
    fps = await asyncio.to_thread(fingerprint, [f for s in sources for f in s.files])
    key = make_key(
        "python", project=space.project, code=args.query, views={s.name: s.sql() for s in sources}, files=fps
    )
    cache = cache_of(ctx)
    hit = await asyncio.to_thread(cache.get, key)
    if hit is not None:
        meta, cache_hit = hit["meta"], True
    else:
        ecfg = config(space, args.timeout_ms)
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
        await asyncio.to_thread(cache.put, key, _cache_entry(meta, fps, args, space))
    row = _result_row(ctx, meta, "-- python\n" + args.query[:100_000], fps, key, args)
    await QueryRepository(ctx.session, space.project).save(row)
    return await _answer(args, meta, cache_hit, "python", "", views, config(space))


def _pick_engine(args: QueryIn, python_enabled: bool) -> str:
    """The documented rule: sql -> duckdb; polars_expr -> the restricted expression compiler (DuckDB runs
    it); python -> the pandas sandbox, only when enabled."""
    if args.query_type == "python" or args.engine == "pandas":
        if args.query_type != "python":
            raise InvalidInput("engine 'pandas' runs query_type 'python' only")
        if not python_enabled:
            raise InvalidInput(
                "The python/pandas engine is disabled on this server",
                suggestions=[
                    "Use query_type 'sql' (DuckDB) or 'polars_expr'",
                    "An operator can enable it with CAIRN_DATASETS_PYTHON_ENABLED=true",
                ],
            )
        return "python"
    if args.query_type == "polars_expr":
        if args.engine == "duckdb":
            raise InvalidInput("engine 'duckdb' runs query_type 'sql'; use engine 'polars' or 'auto' for polars_expr")
        return "polars_expr→duckdb"
    if args.engine == "polars":
        raise InvalidInput("engine 'polars' runs query_type 'polars_expr'; use 'duckdb' or 'auto' for SQL")
    return "duckdb"


def _result_type(normalized: str, fmt: str) -> Literal["tabular", "aggregation", "chart"]:
    """The kind of result a query (its text as `normalize_sql` gives it) returns."""
    if fmt == "chart":
        return "chart"
    norm = normalized.lower()
    if "group by" in norm or re.search(r"\b(count|sum|avg|min|max|median|stddev|quantile\w*)\s*\(", norm):
        return "aggregation"
    return "tabular"


def _csv_lines(columns: list[str], rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for values in [columns] + [[r.get(c) for c in columns] for r in rows]:
        buf = io.StringIO()
        # A "\r\n" terminator, cut off after, makes the writer quote a value holding a line break.
        csv.writer(buf, lineterminator="\r\n").writerow([engine.cell_text(v) for v in values])
        lines.append(buf.getvalue().removesuffix("\r\n"))
    return lines


# Tokens an inline chart spec leaves below its share, for what the reply's last fields (degradation,
# truncated, next_offset) may add once its rows are fitted.
CHART_MARGIN = 8


async def _chart(
    args: QueryIn,
    meta: dict[str, Any],
    ecfg: engine.EngineConfig,
    rows: list[dict[str, Any]],
    whole: dict[str, Any] | None,
    envelope: budget.Envelope,
    limit: int,
) -> Visualization:
    """The chart of a stored result (see `charts.make_chart`): an inline Vega-Lite spec shares the budget
    with the rows shown (which may take at most half of what the reply's fixed part leaves) or, in a
    reply without rows, with the summary `whole` (at most a quarter); `envelope` builds the reply it
    is counted in."""
    from app.datasets.engine import charts

    images = budget.image_fields(QueryOut)

    def cost(viz: Visualization) -> int:
        payload = envelope([], None, "rows_and_summary")
        payload["visualization"] = viz.model_dump(mode="json", by_alias=True)
        return budget.tokens_of(budget.finalize(payload, image_fields=images), images)

    def wanted() -> int:  # the tokens the rows or the summary would take
        if rows:
            return sum(budget.item_tokens(rows)) + len(rows)
        return budget.tokens_of(whole) if whole is not None else 0

    others = await asyncio.to_thread(wanted)
    return await charts.make_chart(
        ecfg,
        Path(meta["result_path"]),
        args.chart_type or "bar",
        meta["columns"],
        meta["types"],
        args.chart_format,
        max_bytes=get_dataset_settings().datasets_chart_max_bytes,
        rows_total=meta["rows_total"],
        cost=cost,
        limit=limit - CHART_MARGIN,
        others=others,
        others_share=0.5 if rows else 0.25,
    )


async def _answer(
    args: QueryIn,
    meta: dict[str, Any],
    cache_hit: bool,
    engine_used: str,
    normalized: str,
    views: list[str],
    ecfg: engine.EngineConfig,
    head: list[dict[str, Any]] | None = None,
    writing: asyncio.Future[Any] | None = None,
) -> QueryOut:
    """The reply within the budget. `normalized`: the query's text as `normalize_sql` gives it (it
    tells an aggregation from a table); `head`: the first rows of the result when the query has just
    stored them (else they are read from the stored file); `writing`: the stored file's write, when it
    is still under way (a summary of rows left out of the reply waits for it)."""
    loop = asyncio.get_running_loop()
    path = Path(meta["result_path"])
    columns: list[str] = meta["columns"]
    # The stored file's types, when they are the result's: HUGEINT and INTERVAL values are stored as
    # another type (engine._storable), and the summary then reads the file's own.
    stored_as_is = not any("HUGEINT" in t or "INTERVAL" in t for t in meta["types"])
    described = list(zip(columns, meta["types"], strict=True)) if stored_as_is else None
    want = min(_rows_shown(args), meta["rows_stored"])
    if head is not None:
        rows = head[:want]
    else:
        rows = await engine.offload(engine.read_rows, ecfg, path, 0, want) if want else []
    visualization: Visualization | None = None
    summary = QuerySummary(
        rows_processed=meta["rows_total"],
        execution_time_ms=meta["elapsed_ms"],
        cache_hit=cache_hit,
        engine_used=engine_used,
    )
    result_type = _result_type(normalized, args.return_format)
    limit = budget_of(args.max_tokens)
    images = budget.image_fields(QueryOut)  # a chart travels as MCP image content, not text

    def envelope(kept: list[Any], rest: dict[str, Any] | None, level: Any) -> dict[str, Any]:
        data: list[Any] = _csv_lines(columns, kept) if args.return_format == "csv" else kept
        shown = len(kept)
        nxt = shown if shown < meta["rows_stored"] else None
        out = QueryOut(
            result_type=result_type,
            data=data,
            summary=summary,
            columns=columns,
            column_types=meta["types"],
            visualization=visualization,
            context_tokens_used=0,
            query_id=meta["query_id"],
            rows_total=meta["rows_total"],
            rows_returned=shown,
            truncated=level != "none" or shown < meta["rows_total"],
            degradation=level,
            rest_summary=rest,
            next_offset=nxt,
            views=views,
        )
        return out.model_dump(mode="json", by_alias=True)

    whole = None
    if args.return_format == "summary" or (args.return_format == "chart" and not rows):
        whole = await engine.offload(engine.summarize_stored, ecfg, path, 0, described=described)
    if args.generate_chart or args.return_format == "chart":
        visualization = await _chart(args, meta, ecfg, rows, whole, envelope, limit)

    if whole is not None:
        trimmed = budget.shrink_summary(
            whole,
            lambda s: budget.tokens_of(budget.finalize(envelope([], s, "none"), image_fields=images), images) <= limit,
        )
        level = "none" if trimmed is not None and "columns_omitted" not in trimmed else "summary_only"
        payload = envelope([], trimmed, level)
        payload["truncated"] = level != "none"
        return QueryOut.model_validate(budget.finalize(payload, image_fields=images))

    summaries: dict[int, dict[str, Any]] = {}

    def rest_summary(offset: int) -> dict[str, Any]:
        if writing is not None:  # in fit's thread
            asyncio.run_coroutine_threadsafe(_written(writing), loop).result()
        if offset not in summaries:  # the ladder may ask twice for one offset: each is a worker call
            summaries[offset] = engine.offload_sync(engine.summarize_stored, ecfg, path, offset, described=described)
        return summaries[offset]

    # Every row in hand: the ladder's first guess at a summary's size is made from them, not a worker call.
    complete = len(rows) == meta["rows_stored"]

    def estimate(offset: int) -> dict[str, Any]:
        return _rest_estimate(rows, offset, columns, meta["types"])

    def fit() -> dict[str, Any]:
        sent = _csv_lines(columns, rows)[1:] if args.return_format == "csv" else None
        return budget.fit_rows(envelope, rows, limit, rest_summary, images, sent, estimate if complete else None)[0]

    if len(rows) <= FEW_ROWS:  # counted here: a thread hop costs more than counting a few rows
        full = budget.finalize(envelope(rows, None, "none"), image_fields=images)
        if full["context_tokens_used"] <= limit:  # what fit_rows answers first when it can
            return QueryOut.model_validate(full)
    return QueryOut.model_validate(await asyncio.to_thread(fit))


def _rest_estimate(
    rows: list[dict[str, Any]], offset: int, columns: list[str], types: list[str], max_columns: int = 40
) -> dict[str, Any]:
    """About what `engine.summarize_stored` answers for rows `offset` on, made from the rows themselves
    (rendered values): the same keys with values of about the same length. It only sizes a first try
    (`budget.fit_rows`' `estimate_rest`); a summary sent is always DuckDB's."""
    rest = rows[offset:]
    out: dict[str, Any] = {}
    for name, ctype in list(zip(columns, types, strict=False))[:max_columns]:
        values = [r.get(name) for r in rest if r.get(name) is not None]
        texts = sorted(v if isinstance(v, str) else json.dumps(v, default=str) for v in values)
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        entry: dict[str, Any] = {
            "type": ctype,
            "min": (min(numbers) if numbers else texts[0][:40]) if values else None,
            "max": (max(numbers) if numbers else texts[-1][:40]) if values else None,
            "distinct": len(set(texts)),
            "null_pct": round(100.0 * (len(rest) - len(values)) / len(rest), 2) if rest else 0.0,
        }
        if numbers and engine.is_numeric(ctype):
            entry["mean"] = float(f"{statistics.fmean(numbers):.6g}")
            entry["std"] = float(f"{statistics.stdev(numbers):.6g}") if len(numbers) > 1 else None
        out[name] = entry
    omitted = {"columns_omitted": len(columns) - max_columns} if len(columns) > max_columns else {}
    return {"rows": len(rest), "from_row": offset, "columns": out, **omitted}


async def get_result(ctx: CallContext, args: ResultPageIn) -> ResultPageOut:
    """A page of a stored result, within the budget."""
    space = await space_of(ctx, args.project)
    q = await QueryRepository(ctx.session, space.project).get(args.query_id)
    if q is None:
        raise NotFound(f"Unknown query_id {args.query_id}", suggestions=["Run execute_query to get a query_id"])
    path = Path(q.result_path)
    await _settled(q.query_id, path, q.created_at)
    rows = await engine.offload(engine.read_rows, config(space), path, args.offset, args.limit)
    columns = [c[0] for c in q.columns]
    limit = budget_of(args.max_tokens)

    def build(k: int) -> dict[str, Any]:
        end = args.offset + k
        out = ResultPageOut(
            query_id=q.query_id,
            columns=columns,
            rows=rows[:k],
            offset=args.offset,
            rows_total=q.rows_total,
            rows_stored=q.rows_stored,
            next_offset=end if end < q.rows_stored else None,
            truncated=k < len(rows),
            context_tokens_used=0,
        )
        return budget.finalize(out.model_dump(mode="json"))

    k = await asyncio.to_thread(budget.largest_fitting, len(rows), lambda m: build(m)["context_tokens_used"] <= limit)
    return ResultPageOut.model_validate(build(k))


# ------------------------------------------------------------------------------------------------ sample


async def stream_sample(ctx: CallContext, args: SampleIn) -> SampleOut:
    """Representative rows of one dataset."""
    if args.strategy == "stratified" and not args.stratify_column:
        raise invalid_field(
            "stratify_column", "stratify_column is required for the stratified strategy", rule="required"
        )
    space = await space_of(ctx, args.project)
    src = await resolve_source(ctx, space, args.file_path)
    res = await engine.offload(
        profiling.sample,
        config(space),
        src,
        strategy=args.strategy,
        size=args.sample_size,
        columns=args.columns,
        stratify_column=args.stratify_column,
        seed=args.seed,
    )
    limit = budget_of(args.max_tokens)
    rows = res["rows"]

    def build(k: int) -> dict[str, Any]:
        info = SamplingInfo(
            strategy=args.strategy,
            rows_sampled=k,
            total_rows=res["total"],
            columns_included=res["columns"],
            seed=args.seed,
            details=res["info"],
        )
        out = SampleOut(sample=rows[:k], sampling_info=info, context_tokens_used=0, truncated=k < len(rows))
        return budget.finalize(out.model_dump(mode="json"))

    k = await asyncio.to_thread(budget.largest_fitting, len(rows), lambda m: build(m)["context_tokens_used"] <= limit)
    return SampleOut.model_validate(build(k))


# ------------------------------------------------------------------------------------------------ export


async def export_result(ctx: CallContext, args: ExportIn) -> ExportOut:
    """Write a stored result of the caller's project into the project's folder (see `exporting`)."""
    space = await space_of(ctx, args.project)
    q = await QueryRepository(ctx.session, space.project).get(args.query_id)
    if q is None:
        raise NotFound(f"Unknown query_id {args.query_id}", suggestions=["Run execute_query to get a query_id"])
    source = Path(q.result_path)
    await _settled(q.query_id, source, q.created_at)
    if not inside(source, [space.work / "results"]) or not await asyncio.to_thread(source.is_file):
        raise NotFound("The stored result is gone (expired or evicted)", suggestions=["Run the query again"])
    columns = [c[0] for c in q.columns]
    if args.partition_by is not None and args.partition_by not in columns:
        raise InvalidInput(
            f"partition_by column '{args.partition_by}' is not in the result",
            suggestions=[f"Columns: {', '.join(columns[:20])}"],
        )
    name = exporting.output_name(args)
    dest_dir = await asyncio.to_thread(exporting.destination, space.folder, args.destination)
    files = await asyncio.to_thread(exporting.export, config(space), source, dest_dir, name, args, q.rows_stored)
    total = sum(f.size_bytes for f in files)
    return ExportOut(
        exported=True,
        output_path=str(dest_dir / name),
        row_count=q.rows_stored,
        file_size=engine.human_bytes(total),
        files_created=[f.path for f in files[:100]],
        files=files[:100],
        files_total=len(files),
    )


# ------------------------------------------------------------------------------------------------ cache


async def cache_invalidate(ctx: CallContext, args: InvalidateIn) -> InvalidateOut:
    """Drop the caller's project's cache entries by key/label pattern or by input file."""
    if args.pattern is None and args.file_path is None:
        raise InvalidInput("Give a pattern ('*' drops everything) or a file_path")
    space = await space_of(ctx, args.project)
    files: list[str] | None = None
    if args.file_path is not None:
        src = await resolve_source(ctx, space, args.file_path)
        files = [str(p) for p in src.files]
    removed = await asyncio.to_thread(cache_of(ctx).invalidate, args.pattern, files, space.project)
    return InvalidateOut(
        invalidated_count=len(removed), keys_removed=[describe(e) for e in removed[:MAX_LISTED_ENTRIES]]
    )


# ------------------------------------------------------------------------------------------------ registry


def _scan_files(rts: list[Path], limit: int) -> tuple[list[FileOut], bool]:
    """Data files in the roots, by the shortest name that reads them back: relative to their root when
    no earlier root holds the same relative path, else absolute. Hidden files (staged uploads,
    exports being written) are skipped."""
    out: list[FileOut] = []
    for i, root in enumerate(rts):
        for path in sorted(root.rglob("*")):
            name = path.name.lower().removesuffix(".gz").removesuffix(".zst")
            rel = path.relative_to(root)
            hidden = any(part.startswith(".") for part in rel.parts)
            if hidden or not path.is_file() or not name.endswith(DATA_EXTENSIONS):
                continue
            if len(out) >= limit:
                return out, True
            shadowed = any((earlier / rel).exists() for earlier in rts[:i])
            out.append(
                FileOut(
                    path=str(path) if shadowed else str(rel),
                    format=file_format(str(path)),
                    size_bytes=path.stat().st_size,
                )
            )
    return out, False


async def list_datasets(ctx: CallContext, args: ListDatasetsIn) -> ListDatasetsOut:
    """The project's registered datasets and the data files it can read."""
    space = await space_of(ctx, args.project)
    rows, total = await DatasetRepository(ctx.session, space.project).list(args.limit, args.offset)
    rts = space.roots
    files, more = (await asyncio.to_thread(_scan_files, rts, MAX_LISTED_FILES)) if args.include_files else ([], False)
    nxt = args.offset + len(rows)
    return ListDatasetsOut(
        datasets=[dataset_out(d) for d in rows],
        total=total,
        next_offset=nxt if nxt < total else None,
        project=space.project,
        roots=[str(r) for r in rts],
        files=files,
        files_truncated=more,
    )


async def register_dataset(ctx: CallContext, args: RegisterIn) -> RegisterOut:
    """Register a name, in the caller's project, for a file or glob it can read."""
    space = await space_of(ctx, args.project)
    pattern, files = await asyncio.to_thread(resolve_path, args.path, space.roots)
    return await register(
        ctx,
        space,
        name=args.name,
        pattern=pattern,
        files=files,
        description=args.description,
        source="registered",
        replace=args.replace,
    )


UPLOAD_TYPES = re.compile(r"(\.(csv|tsv|txt|parquet|pq|json|jsonl|ndjson))(\.(gz|zst))?$", re.I)


@dataclasses.dataclass
class Received:
    """An upload body read to the end: the file staged under `staged` and the other form fields."""

    staged: Path
    filename: str
    fields: dict[str, str]
    size: int


class Incoming(Protocol):
    """The body of an upload request, read once into a folder (the route provides it)."""

    async def receive(self, folder: Path, limit: int) -> Received:
        """Stream the file part to a new hidden file in `folder` (at most `limit` bytes) and return
        what was received; a second call returns the same without reading again."""
        ...


# Set by the upload route around its call of the executor: the operation reads the body itself, so the
# rate limit, scope and project are checked before a byte of it is read.
INCOMING: ContextVar[Incoming | None] = ContextVar("datasets_incoming_upload", default=None)


def upload_folder(space: Space) -> Path:
    """Where a project's uploads live: `uploads/` in its own folder."""
    return space.folder / exporting.UPLOADS


async def upload_dataset(ctx: CallContext, args: UploadIn) -> UploadOut:
    """Read the upload body into the project's `uploads/` folder, then move the file into place as
    `uploads/<name><ext>` and register it under `name`. Nothing of a refused upload is kept."""
    incoming = INCOMING.get()
    if incoming is None:
        raise InvalidInput("upload_dataset reads a multipart body: POST /api/v1/datasets/upload")
    space = await space_of(ctx, args.project)
    folder = upload_folder(space)
    await asyncio.to_thread(exporting.destination, space.folder, exporting.UPLOADS, uploads=True)
    received = await incoming.receive(folder, get_dataset_settings().datasets_upload_max_bytes)
    try:
        form = UploadForm.model_validate(received.fields)
    except ValidationError as exc:
        raise validation_error(exc.errors(include_url=False)) from None
    m = UPLOAD_TYPES.search(received.filename)
    if not m:
        raise invalid_field(
            "file",
            f"Unsupported file type: {received.filename[:200]}",
            rule="file_type",
            suggestions=["Upload CSV, TSV, Parquet, JSON or NDJSON (optionally .gz/.zst)"],
        )
    final = folder / f"{form.name}{m.group(0).lower()}"
    repo = DatasetRepository(ctx.session, space.project)
    existing = await repo.get(form.name)
    if existing is not None and not form.replace and existing.path != str(final):
        raise Conflict(
            f"Dataset '{form.name}' already exists for another path",
            suggestions=["Send replace=true to point the name at the upload"],
        )

    def put_in_place() -> None:
        try:
            exporting.place(received.staged, final, overwrite=form.replace)
        except Conflict:
            raise Conflict(
                f"A dataset file named {final.name} already exists", suggestions=["Send replace=true to overwrite it"]
            ) from None

    await asyncio.to_thread(put_in_place)
    result = await register(
        ctx,
        space,
        name=form.name,
        pattern=str(final),
        files=[final],
        description=form.description,
        source="upload",
        replace=form.replace,
    )
    return UploadOut(dataset=result.dataset, created=result.created, bytes=received.size)


async def register(
    ctx: CallContext,
    space: Space,
    *,
    name: str,
    pattern: str,
    files: list[Path],
    description: str,
    source: str,
    replace: bool,
) -> RegisterOut:
    """Insert or update a registry row of the space's project (shared by the tool and the upload)."""
    if not all(inside(f, space.roots) for f in files):
        raise InvalidInput("Every file must lie inside a data root or the project's folder")
    repo = DatasetRepository(ctx.session, space.project)
    existing = await repo.get(name)
    if existing is not None and not replace and existing.path != pattern:
        raise Conflict(
            f"Dataset '{name}' already exists for another path",
            suggestions=["Pass replace=true to point the name at the new path"],
        )
    size = await asyncio.to_thread(lambda: sum(f.stat().st_size for f in files))
    row, created = await repo.upsert(
        name=name,
        path=pattern,
        fmt=file_format(str(files[0]) if files else pattern),
        size_bytes=size,
        description=description,
        source=source,
        created_by=ctx.principal.key_id,
        replace=True,
    )
    return RegisterOut(dataset=dataset_out(row), created=created)
