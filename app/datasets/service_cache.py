"""cache_manager: what the result cache holds for the caller's project, newest first: each live entry
(a query's stored result or a profile) named as the caller knows it, with its size (the entry and its
stored result), age, time left and the hits this process answered from it."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from app.core import budget
from app.core.context import CallContext
from app.datasets.config import DatasetSettings
from app.datasets.engine.cache import Cache, describe, matches
from app.datasets.schemas_cache import CacheEntryOut, CacheListIn, CacheListOut
from app.datasets.service_common import Space, cache_of, space_of
from app.datasets.storage import S3Store, is_key

NAME_CHARS = 80  # of an entry's name in the listing


@dataclass(frozen=True)
class Listed:
    """A live entry of the project's cache, its size in bytes (entry and stored result)."""

    entry: dict[str, Any]
    size: int


def live_entries(space: Space, cache: Cache, pattern: str | None, now: float) -> list[Listed]:
    """The project's entries that a call could still be answered from (not expired, their stored
    result present), newest first; with `pattern`, those whose key, label or query_id match. Blocks
    (reads every entry, lists the project's stored results)."""
    results = {o.key: o.size for o in space.store.listing(f"results/{space.project}/")}
    out: list[Listed] = []
    for name in cache.store.names():
        data = cache.store.read(name)
        try:
            entry = json.loads(data) if data else None
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("project", "default") != space.project:
            continue
        if float(entry.get("expires_at", 0)) < now or (pattern is not None and not matches(entry, pattern)):
            continue
        stored = _result_size(entry, results)
        if stored is None:
            continue
        out.append(Listed(entry, len(data or b"") + stored))
    out.sort(key=lambda e: -float(e.entry.get("created_at", 0)))
    return out


def _result_size(entry: dict[str, Any], results: dict[str, int]) -> int | None:
    """Bytes of the entry's stored result (0 for a profile, which has none); None when it is gone."""
    meta = entry.get("meta")
    path = entry.get("result_path") or (meta.get("result_path") if isinstance(meta, dict) else None)
    if path is None:
        return 0
    if is_key(str(path)):
        return results.get(str(path))
    try:  # an entry written before results had store keys
        return Path(str(path)).stat().st_size
    except OSError:
        return None


def entry_out(listed: Listed, cache: Cache, now: float) -> CacheEntryOut:
    """How the listing shows one entry."""
    entry = listed.entry
    key = str(entry.get("key", ""))
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else None
    kind: Literal["query", "python", "profile"] = (
        "profile" if key.startswith("profile:") else "python" if key.startswith("python:") else "query"
    )
    return CacheEntryOut(
        name=describe(entry, NAME_CHARS),
        kind=kind,
        bytes=listed.size,
        age_s=max(0, int(now - float(entry.get("created_at", now)))),
        expires_in_s=max(0, int(float(entry.get("expires_at", now)) - now)),
        hits=cache.hits(key),
        rows=int(meta["rows_total"]) if meta is not None and "rows_total" in meta else None,
    )


async def cache_manager(ctx: CallContext, args: CacheListIn) -> CacheListOut:
    """A page of the caller's project's cache entries, with the cache's totals and limits."""
    cfg = ctx.feature_settings(DatasetSettings)
    space = await space_of(ctx, args.project)
    cache = cache_of(ctx, space)
    now = time.time()
    listed = await asyncio.to_thread(live_entries, space, cache, args.pattern, now)
    page = listed[args.offset : args.offset + args.limit]
    end = args.offset + len(page)
    out = CacheListOut(
        project=space.project,
        entries=[entry_out(e, cache, now) for e in page],
        entries_total=len(listed),
        bytes_total=sum(e.size for e in listed),
        next_offset=end if end < len(listed) else None,
        ttl_s=cfg.datasets_cache_ttl_seconds,
        max_bytes=cfg.datasets_cache_max_bytes,
        local_copies_bytes=space.store.cache.total_bytes if isinstance(space.store, S3Store) else None,
        context_tokens_used=0,
    )
    return CacheListOut.model_validate(budget.finalize(out.model_dump(mode="json")))
