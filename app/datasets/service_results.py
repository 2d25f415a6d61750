"""Stored query results after their query: the file of a result answered before it was written (its
readers wait for it), paging a result (get_result), exporting it (export_result) and dropping cached
results and profiles (cache_invalidate)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.core import budget
from app.core.context import CallContext
from app.core.cuts import Cut
from app.core.errors import InvalidInput, NotFound
from app.datasets import cuts, engine
from app.datasets.config import DatasetSettings
from app.datasets.engine import exporting
from app.datasets.engine.cache import describe
from app.datasets.repository import CacheEpochRepository, QueryRepository
from app.datasets.schemas import (
    ExportedFile,
    ExportIn,
    ExportOut,
    InvalidateIn,
    InvalidateOut,
    ResultPageIn,
    ResultPageOut,
)
from app.datasets.service_common import (
    Space,
    budget_of,
    cache_of,
    engine_config,
    name_caller,
    resolve_source,
    space_of,
    stored_file,
)
from app.datasets.storage import FolderStore, is_key, project_key

log = logging.getLogger("cairn.datasets")
MAX_LISTED_ENTRIES = 50  # cache entries named in a cache_invalidate reply
MAX_LISTED_FILES = 100  # files an export lists with list_files
MAX_TOKENS = 20_000  # the largest max_tokens a call may pass: a next call never asks for more

# Results answered before their file was in place (`engine.execute_to_store`'s early answer), by
# query_id, until the file is: whoever reads one of them in this process waits for it (`settled`).
_WRITING: dict[str, asyncio.Future[Any]] = {}
# How long a reader waits for the file of a result another server process has just answered with.
SETTLE_S = 5.0
# The same results by cache key, until their cache entry is written: the same query asked again
# meanwhile in this process waits for the entry (`cache_entry_written`) instead of running again.
_REMEMBERING: dict[str, asyncio.Future[Any]] = {}


def store_later(
    query_id: str,
    later: asyncio.Future[Any],
    remember: Callable[[], None],
    publishing: Callable[[], Any],
    cache_key: str | None = None,
) -> None:
    """Track the file of a result answered early: readers in this process wait for it, and once it is
    written `publishing` (which puts it in the store) then `remember` (which writes its cache entry,
    under `cache_key`) run in a thread: an entry whose file is missing would count as a miss."""
    done = asyncio.ensure_future(_publish_later(query_id, later, publishing, remember))
    _WRITING[query_id] = done
    if cache_key is not None:
        _REMEMBERING[cache_key] = done

    def forget(task: asyncio.Future[Any]) -> None:
        _WRITING.pop(query_id, None)
        if cache_key is not None and _REMEMBERING.get(cache_key) is task:
            del _REMEMBERING[cache_key]
        if not task.cancelled():
            task.exception()  # retrieved: its readers find the file missing, the log has the cause

    done.add_done_callback(forget)


async def _publish_later(
    query_id: str, later: asyncio.Future[Any], publishing: Callable[[], Any], remember: Callable[[], None]
) -> None:
    def both() -> None:
        publishing()
        try:
            remember()
        except Exception as exc:  # a later call misses the cache: nothing else is wrong
            log.warning("a cache entry was not written: %s", exc)

    try:
        await asyncio.shield(later)
        # One thread for both: the cache entry follows the file as closely as before there was a store.
        await asyncio.to_thread(both)
    except Exception as exc:
        log.warning("the result %s was answered but its file was not stored: %s", query_id, exc)
        raise


def publish(space: Space, key: str, local: Path) -> None:
    """Put a stored result just written locally into the space's store under `key` (the local store
    already holds it there). Blocks."""
    space.store.put(key, local, keep=True)


async def cache_entry_written(cache_key: str, timeout: float = SETTLE_S) -> bool:
    """Whether a result of `cache_key` answered early in this process was having its cache entry
    written; if so, return once it is (or once it failed, or after `timeout` seconds)."""
    writing = _REMEMBERING.get(cache_key)
    if writing is None:
        return False
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(written(writing), timeout)
    return True


async def written(writing: asyncio.Future[Any]) -> None:
    """Wait for a stored result's write to end, however it ends (a reader of a missing file says so)."""
    with contextlib.suppress(Exception):
        await asyncio.shield(writing)


async def settled(space: Space, query_id: str, path: str, created_at: Any) -> None:
    """Return once the stored result `query_id` (at `path`, its key or older local path) is in place,
    or once it will not be: one this process answered early is awaited; one answered moments ago by
    another process (or host) is looked for until SETTLE_S after it was recorded."""
    later = _WRITING.get(query_id)
    if later is not None:
        await written(later)
        return
    if not isinstance(created_at, datetime.datetime):
        return
    until = created_at.timestamp() + SETTLE_S

    def there() -> bool:
        return space.store.head(path) is not None if is_key(path) else Path(path).is_file()

    # Written by another process or host: there is nothing to wait on but the file itself (a remote
    # store is asked less often: each look is a request).
    pause = 0.01 if isinstance(space.store, FolderStore) else 0.05
    while time.time() < until and not await asyncio.to_thread(there):  # noqa: ASYNC110
        await asyncio.sleep(pause)


async def result_file(space: Space, query_id: str, path: str, created_at: Any) -> Path:
    """The local file of a stored result, once settled (fetched from a remote store); 4002 when gone."""
    await settled(space, query_id, path, created_at)
    local = await asyncio.to_thread(stored_file, space, path)
    if local is None:
        raise NotFound("The stored result is gone (expired or evicted)", suggestions=["Run the query again"])
    return local


async def get_result(ctx: CallContext, args: ResultPageIn) -> ResultPageOut:
    """A page of a stored result, within the budget."""
    cfg = ctx.feature_settings(DatasetSettings)
    space = await space_of(ctx, args.project)
    name_caller(ctx)
    q = await QueryRepository(ctx.session, space.project).get(args.query_id)
    if q is None:
        raise NotFound(f"Unknown query_id {args.query_id}", suggestions=["Run execute_query to get a query_id"])
    path = await result_file(space, q.query_id, q.result_path, q.created_at)
    rows = await engine.offload(engine.read_rows, engine_config(cfg, space), path, args.offset, args.limit)
    columns = [c[0] for c in q.columns]
    limit = budget_of(cfg, args.max_tokens)

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
            cut=page_cut(args, limit, k, len(rows), q.rows_stored) if k < len(rows) else None,
        )
        return budget.finalize(out.model_dump(mode="json"))

    k = await asyncio.to_thread(budget.largest_fitting, len(rows), lambda m: build(m)["context_tokens_used"] <= limit)
    return ResultPageOut.model_validate(build(k))


def page_cut(args: ResultPageIn, limit: int, k: int, asked: int, stored: int) -> Cut:
    """What a page cut to its budget left out (the rows after the `k` shown of the `asked` it read) and
    the call that gets them: the next page, or, when not even one row fits, this one with a larger
    budget."""
    first = args.offset + k + 1
    left = cuts.rows_text(first, args.offset + asked, stored)
    reason = cuts.budget_reason(limit, args.max_tokens)
    if k == 0:
        more = min(MAX_TOKENS, 2 * limit)
        return cuts.cut(reason, [left], "get_result", offset=args.offset, max_tokens=more)
    return cuts.cut(reason, [left], "get_result", offset=args.offset + k)


async def export_result(ctx: CallContext, args: ExportIn) -> ExportOut:
    """Write a stored result of the caller's project into the project's folder (see `exporting`)."""
    space = await space_of(ctx, args.project)
    name_caller(ctx)
    q = await QueryRepository(ctx.session, space.project).get(args.query_id)
    if q is None:
        raise NotFound(f"Unknown query_id {args.query_id}", suggestions=["Run execute_query to get a query_id"])
    source = await result_file(space, q.query_id, q.result_path, q.created_at)
    columns = [c[0] for c in q.columns]
    if args.partition_by is not None and args.partition_by not in columns:
        raise InvalidInput(
            f"partition_by column '{args.partition_by}' is not in the result",
            suggestions=[f"Columns: {', '.join(columns[:20])}"],
        )
    name = exporting.output_name(args)
    dest_dir = await asyncio.to_thread(exporting.destination, space.folder, args.destination)
    ecfg = engine_config(ctx.feature_settings(DatasetSettings), space)
    files = await asyncio.to_thread(exporting.export, ecfg, source, dest_dir, name, args, q.rows_stored)
    await asyncio.to_thread(_publish_export, space, [Path(f.path) for f in files])
    total = sum(f.size_bytes for f in files)
    target = dest_dir / name
    # Paths relative to the project's folder: the form every datasets tool takes as a file_path, and
    # no host path in the reply.
    shown = [ExportedFile(path=relative(space.folder, f.path), size_bytes=f.size_bytes) for f in files]
    pattern, left = None, 0
    if args.partition_by is not None and args.format != "xlsx":  # xlsx: one file, a worksheet per value
        pattern = files_pattern(space.folder, target, args.partition_by, files)
        # The pattern names every file: the reply is whole without their paths, which list_files adds.
        shown = shown[:MAX_LISTED_FILES] if args.list_files else []
        left = len(files) - len(shown) if args.list_files else 0
    cut = None
    if left:
        under = relative(space.folder, target)
        cut = cuts.cut(
            f"at most {MAX_LISTED_FILES} files listed", [f"{left} file paths"], "list_datasets", files_under=under
        )
    return ExportOut(
        exported=True,
        output_path=relative(space.folder, target),
        row_count=q.rows_stored,
        file_size=engine.human_bytes(total),
        files_created=[f.path for f in shown],
        files_total=len(files),
        files_pattern=pattern,
        files=shown if args.list_files else None,
        cut=cut,
    )


def relative(folder: Path, path: Path | str) -> str:
    """`path`, a file or folder inside the project's `folder`, relative to it."""
    return str(Path(path).relative_to(folder))


def files_pattern(folder: Path, target: Path, column: str | None, files: list[ExportedFile]) -> str:
    """The glob, relative to the project's `folder`, that matches every file of a partitioned export
    written to `target` (Hive folders `<column>=<value>/` holding `data_<n>.<ext>`)."""
    base = relative(folder, target)
    names = [Path(f.path).relative_to(target) for f in files]
    suffixes = {"".join(n.suffixes) for n in names}
    ext = suffixes.pop() if len(suffixes) == 1 else ""
    depth = {len(n.parts) for n in names}
    if depth == {2}:
        return f"{base}/{column}=*/*{ext}"
    return f"{base}/**/*{ext}"


async def cache_invalidate(ctx: CallContext, args: InvalidateIn) -> InvalidateOut:
    """Drop the caller's project's cache entries by key/label pattern or by input file."""
    if args.pattern is None and args.file_path is None:
        raise InvalidInput("Give a pattern ('*' drops everything) or a file_path")
    space = await space_of(ctx, args.project)
    files: list[str] | None = None
    if args.file_path is not None:
        src = await resolve_source(ctx, space, args.file_path)
        files = [space.store.portable(str(p)) for p in src.files]
    removed = await asyncio.to_thread(cache_of(ctx, space).invalidate, args.pattern, files, space.project)
    # Every host re-reads from the store the entries it remembered before this epoch (see `Cache`).
    await CacheEpochRepository(ctx.session, space.project).advance()
    left = len(removed) - MAX_LISTED_ENTRIES
    # The entries are gone: nothing can get their names back, the cut only counts them.
    cut = None
    if left > 0:
        how = "no call: they are dropped; a narrower pattern names every entry it drops"
        cut = cuts.cut(f"at most {MAX_LISTED_ENTRIES} named", [f"names of {left} more entries"], how=how)
    return InvalidateOut(
        invalidated_count=len(removed), keys_removed=[describe(e) for e in removed[:MAX_LISTED_ENTRIES]], cut=cut
    )


def _publish_export(space: Space, files: list[Path]) -> None:
    """Put an export's files into the space's store (under the project's folder), so that every host
    of a fleet can serve them. Blocks."""
    for path in files:
        space.store.put(project_key(space.project, path.relative_to(space.folder)), path, keep=True)
