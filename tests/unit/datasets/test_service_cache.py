"""app/datasets/service_cache.py: cache_manager lists the project's live entries newest first, each with
its size (entry and stored result), age, time left, hits and rows; expired entries, entries whose stored
result is gone and other projects' entries are left out."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from app.core.context import CallContext
from app.datasets.config import DatasetSettings
from app.datasets.engine.cache import Cache
from app.datasets.schemas_cache import CacheListIn
from app.datasets.service_cache import cache_manager, entry_out, live_entries
from app.datasets.service_common import Space, cache_of, space_of
from app.datasets.storage import CacheEntries, S3Store, result_key
from tests.support.datasets import call_context
from tests.support.objectstore import two_spaces_on_s3


@pytest.fixture
def ctx(tmp_path: Path) -> CallContext:
    return call_context(tmp_path, DatasetSettings())


async def cached(ctx: CallContext, project: str = "default") -> tuple[Space, Cache]:
    space = await space_of(ctx, project)
    return space, cache_of(ctx, space)


def stored_result(space: Space, query_id: str, size: int) -> str:
    """A stored result of `size` bytes in the space's store; its key."""
    local = space.work / "results" / f"{query_id}.parquet"
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(b"x" * size)
    return result_key(space.project, query_id)


def query_entry(space: Space, query_id: str, path: str, rows: int, label: str | None = None) -> dict[str, object]:
    meta = {"query_id": query_id, "result_path": path, "rows_total": rows}
    return {
        "meta": meta,
        "files": [],
        "label": label,
        "text": "SELECT 1",
        "result_path": path,
        "project": space.project,
    }


async def test_entries_are_listed_newest_first_with_their_sizes(ctx: CallContext) -> None:
    space, cache = await cached(ctx, "lab")
    older = stored_result(space, "q_000000000000000a", 1000)
    cache.put("query:a", query_entry(space, "q_000000000000000a", older, 7, "by-region"))
    aged = json.loads(cache.store.read("query_a.json") or b"")
    cache.store.write("query_a.json", json.dumps({**aged, "created_at": aged["created_at"] - 10}).encode())
    cache.put("profile:b", {"payload": {"x": 1}, "label": "profile:a.csv", "text": "a.csv", "project": "lab"})
    assert cache.get("query:a") is not None
    out = await cache_manager(ctx, CacheListIn(project="lab"))
    assert [e.name for e in out.entries] == ["profile a.csv", "q_000000000000000a by-region"]
    profile, query = out.entries
    assert (query.kind, query.rows, query.hits) == ("query", 7, 1) and query.bytes > 1000
    assert (profile.kind, profile.rows, profile.hits) == ("profile", None, 0) and 0 < profile.bytes < 1000
    assert out.entries_total == 2 and out.bytes_total == query.bytes + profile.bytes and out.next_offset is None
    assert out.ttl_s == 3600 and query.expires_in_s <= 3600 and out.context_tokens_used > 0
    assert out.local_copies_bytes is None  # the local store keeps no copies
    assert "rows" not in out.model_dump(mode="json")["entries"][0]
    page = await cache_manager(ctx, CacheListIn(project="lab", limit=1))
    assert len(page.entries) == 1 and page.next_offset == 1 and page.entries_total == 2
    only = await cache_manager(ctx, CacheListIn(project="lab", pattern="by-*"))
    assert [e.kind for e in only.entries] == ["query"]


async def test_dead_and_foreign_entries_are_left_out(ctx: CallContext) -> None:
    space, cache = await cached(ctx, "lab")
    cache.put("query:gone", query_entry(space, "q_000000000000000b", result_key("lab", "q_000000000000000b"), 1))
    kept = stored_result(space, "q_000000000000000c", 10)
    cache.put("query:other", {**query_entry(space, "q_000000000000000c", kept, 1), "project": "elsewhere"})
    expired = {**query_entry(space, "q_000000000000000c", kept, 1), "key": "query:old", "expires_at": time.time() - 1}
    cache.store.write("query_old.json", json.dumps(expired).encode())
    cache.store.write("broken.json", b"{not json")
    assert live_entries(space, cache, None, time.time()) == []
    assert (await cache_manager(ctx, CacheListIn(project="lab"))).entries_total == 0


@pytest.mark.slow  # a real S3 server (rclone)
def test_another_hosts_entries_are_listed_from_the_object_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with two_spaces_on_s3(tmp_path, monkeypatch) as (writer, reader):
        local = writer.work / "results" / "q_000000000000000d.parquet"
        local.write_bytes(b"x" * 500)
        key = result_key("p", "q_000000000000000d")
        writer.store.put(key, local)
        wrote = Cache(tmp_path / "a-cache", tmp_path / "a-results", 60, 10**6, 8, entries=CacheEntries(writer.store))
        wrote.put("query:d", query_entry(writer, "q_000000000000000d", key, 2))
        read = Cache(tmp_path / "b-cache", tmp_path / "b-results", 60, 10**6, 8, entries=CacheEntries(reader.store))
        [listed] = live_entries(reader, read, None, time.time())
        assert listed.size > 500 and listed.entry["meta"]["query_id"] == "q_000000000000000d"
        shown = entry_out(listed, read, time.time())
        assert (shown.name, shown.rows, shown.hits) == ("q_000000000000000d SELECT 1", 2, 0)
        assert isinstance(writer.store, S3Store) and writer.store.cache.total_bytes >= 500  # the writer's copy
