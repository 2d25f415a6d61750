"""Helpers shared by the datasets services: the caller's space (its project's folders), the engine
limits, cache and token budget of a call, and the sources (views) that a call's file references name.
DuckDB work runs in worker processes, each call on a pooled locked database (see `sandbox`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cachetools import TTLCache

from app.core.context import CallContext
from app.core.errors import EngineError, NotFound
from app.datasets import engine
from app.datasets.config import DatasetSettings, data_roots, object_cache_dir, projects_dir, work_dir
from app.datasets.engine import exporting
from app.datasets.engine.cache import Cache, get_cache
from app.datasets.engine.sandbox import file_format, inside, resolve_path
from app.datasets.models import Dataset
from app.datasets.repository import CacheEpochRepository, DatasetRepository
from app.datasets.schemas import DATASET_NAME
from app.datasets.storage import CacheEntries, FolderStore, LocalCache, S3Store, Store, is_key, project_key

QUERY_ID = re.compile(r"\bq_[0-9a-f]{16}\b")
_NAME_RE = re.compile(DATASET_NAME)


@dataclasses.dataclass(frozen=True)
class Space:
    """What one call may touch: its project's private folder (read and written: uploads, exports), the
    operator's shared data roots (read only) and the project's own result store and spill folder."""

    project: str
    folder: Path
    shared: list[Path]
    work: Path
    store: Store
    # Local folders where the project's objects of a remote store are read (none for the local store).
    stored: tuple[Path, ...] = ()

    @property
    def roots(self) -> list[Path]:
        """The readable folders, searched in this order for a relative path: own folder first."""
        return [self.folder, *self.shared]


_STORES: dict[tuple[Any, ...], Store] = {}
_STORES_LOCK = threading.Lock()


def make_store(data_dir: Path, cfg: DatasetSettings) -> Store:
    """The store of the datasets files these settings name (one per process and settings): the object
    store of `CAIRN_OBJECT_STORE_URL`, else the local folders. Looks at the filesystem."""
    key = (
        data_dir,
        cfg.object_store_url,
        cfg.datasets_projects_dir,
        cfg.datasets_work_dir,
        cfg.datasets_object_cache_dir,
    )
    store = _STORES.get(key)
    if store is None:
        if cfg.object_store_url:
            cache = LocalCache(object_cache_dir(data_dir, cfg), cfg.datasets_object_cache_max_bytes)
            store = S3Store(cfg.object_store_url, cache)
        else:
            store = FolderStore(projects_dir(data_dir, cfg), work_dir(data_dir, cfg))
        _STORES[key] = store
    return store


def make_space(data_dir: Path, project: str, cfg: DatasetSettings) -> Space:
    """The space of `project`: its folders created if missing and checked (no private area overlaps a
    shared root, no project folder is a symbolic link). Looks at the filesystem."""
    shared = data_roots(data_dir, cfg)
    base = projects_dir(data_dir, cfg)
    work = work_dir(data_dir, cfg)
    for private, setting in ((base, "CAIRN_DATASETS_PROJECTS_DIR"), (work, "CAIRN_DATASETS_WORK_DIR")):
        # A private area inside a shared root (or holding one) would be readable by every project.
        if any(inside(private, [r]) or inside(r, [private]) for r in shared):
            raise EngineError(
                f"The datasets storage is misconfigured: {setting} overlaps a data root",
                suggestions=[f"The operator must move {setting} outside CAIRN_DATA_ROOTS"],
            )
    folder = base / project
    mine = work / "projects" / project
    # `ctx.project` checks the names calls send, but a key's own project comes from the operator's
    # configuration: whatever it holds, nothing is made outside the project's own folders.
    if Path(os.path.normpath(folder)).parent != base or Path(os.path.normpath(mine)).parent != work / "projects":
        raise EngineError(
            f"The datasets storage is misconfigured: the project {project[:80]!r} is not a folder name",
            suggestions=["The operator must bind the key to a project of letters, digits, '_', '-' and '.'"],
        )
    store = make_store(data_dir, cfg)
    stored: tuple[Path, ...] = tuple(store.local_dirs(project))
    for path in (folder, mine / "results", mine / "tmp", *stored):
        path.mkdir(parents=True, exist_ok=True)
    for path in (folder, mine):
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise EngineError("The datasets storage is misconfigured: a project folder is a symbolic link")
    return Space(project=project, folder=folder, shared=shared, work=mine, store=store, stored=stored)


# Spaces made (folders created and checked) in the last few seconds, by data directory, project and
# the settings that place the folders: most calls then need no filesystem work (nor a thread) for it.
_SPACES: TTLCache[tuple[Any, ...], Space] = TTLCache(maxsize=256, ttl=10)


def _still_there(space: Space) -> bool:
    """True while a remembered space's folders exist (folders removed meanwhile are made again). Two
    stats of local folders are cheap enough for the event loop, unlike a thread hop."""
    return os.path.isdir(space.work / "results") and os.path.isdir(space.folder)


async def space_of(ctx: CallContext, requested: str | None) -> Space:
    """The caller's space: the effective project (`ctx.project`: a bound key keeps to its own, and the
    name is checked there) and its folders, created if missing."""
    project = ctx.project(requested)
    cfg = ctx.feature_settings(DatasetSettings)
    key = (
        ctx.settings.data_dir,
        project,
        tuple(str(r) for r in cfg.data_roots),
        cfg.datasets_projects_dir,
        cfg.datasets_work_dir,
        cfg.object_store_url,
        cfg.datasets_object_cache_dir,
    )
    space = _SPACES.get(key)
    if space is None or not _still_there(space):
        space = await asyncio.to_thread(make_space, ctx.settings.data_dir, project, cfg)
        _SPACES[key] = space
    return space


def caller_of(ctx: CallContext) -> str:
    """Whom a call's DuckDB work counts against: the project a bound key is limited to (a project's
    admin key may mint more keys, which get no more share of the engine), else its API key, else its
    principal's name."""
    if ctx.principal.project is not None:
        return f"project:{ctx.principal.project}"
    return f"key:{ctx.principal.key_id or ctx.principal.name}"


def name_caller(ctx: CallContext) -> None:
    """Name the caller to the engine for the rest of this call (task): the engine slots are shared
    between keys (`engine.set_caller`). Every service that runs DuckDB work calls it first."""
    engine.set_caller(caller_of(ctx))


def engine_config(cfg: DatasetSettings, space: Space, timeout_ms: int | None = None) -> engine.EngineConfig:
    """Engine limits from the settings (a call may only lower the time limit), reading the space's
    roots and storing results in its own store."""
    limit = cfg.datasets_query_timeout_ms if timeout_ms is None else min(timeout_ms, cfg.datasets_query_timeout_ms)
    return engine.EngineConfig(
        roots=space.roots,
        work=space.work,
        memory_limit=cfg.datasets_memory_limit,
        threads=cfg.datasets_threads,
        timeout_s=limit / 1000.0,
        concurrency=cfg.datasets_max_concurrency,
        max_columns=cfg.datasets_max_columns,
        stored=space.stored,
    )


_CACHES: TTLCache[tuple[Any, ...], Cache] = TTLCache(maxsize=16, ttl=10)


def cache_of(ctx: CallContext, space: Space) -> Cache:
    """The process cache of this server's work directory (its folders made again if removed), its
    entries kept in the space's store."""
    cfg = ctx.feature_settings(DatasetSettings)
    key = (ctx.settings.data_dir, cfg.datasets_work_dir, cfg.object_store_url)
    cache = _CACHES.get(key)
    # Two stats on the event loop rather than `work_dir`'s three mkdirs and a resolve on every call.
    if cache is None or not (os.path.isdir(cache.dir) and os.path.isdir(cache.results)):
        cache = get_cache(
            work_dir(ctx.settings.data_dir, cfg),
            cfg.datasets_cache_ttl_seconds,
            cfg.datasets_cache_max_bytes,
            cfg.datasets_cache_memory_entries,
            CacheEntries(space.store),
            cfg.object_store_url or "",
        )
        _CACHES[key] = cache
    return cache


async def cache_epoch(ctx: CallContext, space: Space) -> int:
    """The space's project's cache epoch (one indexed read; see `Cache`)."""
    return await CacheEpochRepository(ctx.session, space.project).current()


def stored_file(space: Space, path: str) -> Path | None:
    """The local file of a stored result of the space's project (`path`: the store key its row holds,
    or the absolute path of a row written before the store): None when it is gone or not the project's.
    Blocks (a remote store is asked)."""
    if is_key(path):
        if not path.startswith(f"results/{space.project}/"):
            return None
        return space.store.fetch(path)
    local = Path(path)
    return local if inside(local, [space.work / "results"]) and local.is_file() else None


def portable_fingerprints(space: Space, fps: list[list[Any]]) -> list[list[Any]]:
    """File fingerprints named the same on every host (a cached object's local path as its key and
    version, without the local copy's mtime), so that hosts share cache entries."""
    out: list[list[Any]] = []
    for f in fps:
        name = space.store.portable(str(f[0]))
        out.append(list(f) if name == str(f[0]) else [name, f[1], 0])
    return out


@contextlib.contextmanager
def storage_errors() -> Iterator[None]:
    """Turn a filesystem failure escaping a datasets call into its own error: the executor would take
    an OSError for a lost database connection."""
    try:
        yield
    except OSError as exc:
        raise exporting.storage_error(exc, "the datasets folders") from None


def budget_of(cfg: DatasetSettings, requested: int | None) -> int:
    """The effective token budget of a call."""
    return min(requested or cfg.datasets_max_tokens, cfg.datasets_max_tokens_cap)


def view_name(text: str, taken: set[str]) -> str:
    """A SQL view name for the file reference `text` (its file stem, made an identifier), apart from
    the names `taken`."""
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


def is_name(ref: str) -> bool:
    """True when `ref` may name a registered dataset (else it is a path or a glob)."""
    return bool(_NAME_RE.fullmatch(ref)) and not any(ch in ref for ch in "./*")


async def registered(ctx: CallContext, space: Space, refs: list[str]) -> dict[str, Dataset]:
    """The datasets of the space's project that `refs` name (one query)."""
    names = [r for r in refs if is_name(r)]
    return await DatasetRepository(ctx.session, space.project).get_many(names) if names else {}


def source_of(
    ref: str,
    known: dict[str, Dataset],
    rts: list[Path],
    taken: set[str],
    store: Store | None = None,
    project: str | None = None,
) -> engine.Source:
    """`ref` as a Source: the registered dataset it names (in `known`: an upload is read from `store`),
    else a path/glob inside the roots `rts` (else a file of `project`'s folder in a remote `store`); its
    view is named apart from the names `taken`. Looks at the filesystem (and the store)."""
    ds = known.get(ref) if is_name(ref) else None
    ref = own_relative(ref, project)
    if ds is not None and store is not None and is_key(ds.path):
        local = store.fetch(ds.path)
        if local is None:
            raise NotFound(
                f"The file of dataset '{ref}' is gone from the object store", suggestions=["Upload it again"]
            )
        name = ref.lower() if ref.lower() not in taken else view_name(ref, taken)
        return engine.Source(name=name, pattern=str(local), files=[local], fmt=file_format(ds.path))
    if ds is not None:
        pattern, files = resolve_path(ds.path, rts)
        name = ref.lower() if ref.lower() not in taken else view_name(ref, taken)
        return engine.make_source(name, pattern, files)
    try:
        pattern, files = resolve_path(ref, rts)
    except NotFound:
        local = stored_copy(store, project, ref)
        if local is None:
            raise
        return engine.Source(name=view_name(ref, taken), pattern=str(local), files=[local], fmt=file_format(ref))
    return engine.make_source(view_name(ref, taken), pattern, files)


def own_relative(ref: str, project: str | None) -> str:
    """`ref` relative to the project's folder when it is the key of one of the project's own files
    (`projects/<project>/uploads/x.csv`, the `path` that answers show for an upload), else `ref`."""
    prefix = f"projects/{project}/"
    return ref[len(prefix) :] if project and ref.startswith(prefix) and len(ref) > len(prefix) else ref


def stored_copy(store: Store | None, project: str | None, ref: str) -> Path | None:
    """The local copy of a file of the project's folder that `ref` (a relative path, no glob) names in a
    remote store, when this host's folder lacks it (another host uploaded or exported it); None when
    there is none, or for the local store. Blocks."""
    if store is None or project is None or isinstance(store, FolderStore):
        return None
    rel = os.path.normpath(ref)
    parts = Path(rel).parts
    if os.path.isabs(ref) or any(ch in ref for ch in "*?[") or not parts or any(p.startswith(".") for p in parts):
        return None
    return store.fetch(project_key(project, rel))


async def resolve_source(ctx: CallContext, space: Space, ref: str, taken: set[str] | None = None) -> engine.Source:
    """A dataset name registered in the space's project, or a path/glob inside its readable roots, as a
    Source."""
    known = await registered(ctx, space, [ref])
    chosen = taken if taken is not None else set()
    return await asyncio.to_thread(source_of, ref, known, space.roots, chosen, space.store, space.project)


def sources_of(
    refs: list[str], known: dict[str, Dataset], rts: list[Path], store: Store | None = None, project: str | None = None
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
        src = source_of(ref, known, rts, taken, store, project)
        taken.add(src.name)
        sources.append(src)
    if len(sources) == 1 and "data" not in taken:
        first = sources[0]
        sources.append(engine.Source(name="data", pattern=first.pattern, files=first.files, fmt=first.fmt))
        taken.add("data")
    return sources, result_ids, taken
