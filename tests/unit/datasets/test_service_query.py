"""app/datasets/service_query.py: the one thread hop before a SQL query
runs (`_prepare`: its views, the query checked, the stored results it names, its cache key and
entry), on real files, the real SQL check and a real cache; the cache epoch read beside it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
from pathlib import Path
from typing import Any, cast

import pytest

from app.core.errors import CairnError, Unavailable
from app.datasets import service_query
from app.datasets.config import DatasetSettings
from app.datasets.engine.cache import Cache
from app.datasets.models import DatasetQuery
from app.datasets.service_common import Space, make_space
from app.datasets.service_query import HEAD_IN_ENTRY_BYTES, _cached_head, _prepare, _with_head, text_of
from tests.support.waiting import eventually


def test_a_cache_entry_names_a_query_by_its_collapsed_text() -> None:
    assert text_of("SELECT *\n\n   FROM  data") == "SELECT * FROM data"
    assert len(text_of("x " * 500)) == 200


def test_a_cache_entry_holds_the_first_rows_of_its_result_only_when_they_are_light() -> None:
    entry = {"meta": {"rows_stored": 3}}
    head = [{"city": "Oslo", "n": 1}, {"city": "Lima", "n": 2}]
    assert _with_head(entry, head) == {**entry, "head": head}
    assert _with_head(entry, None) == entry and _with_head(entry, []) == entry
    heavy = [{"note": "x" * 1000} for _ in range(HEAD_IN_ENTRY_BYTES // 1000 + 1)]
    assert _with_head(entry, heavy) == entry


def test_a_cache_hit_shows_the_rows_of_its_entry_when_it_holds_as_many_as_the_answer_shows() -> None:
    head = [{"n": i} for i in range(5)]
    hit = {"meta": {"rows_stored": 40}, "head": head}
    assert _cached_head(hit, 5) == head and _cached_head(hit, 3) == head  # the answer takes the first 3
    assert _cached_head(hit, 6) is None  # six shown, five held: read from the stored file
    assert _cached_head({"meta": {"rows_stored": 5}, "head": head}, 100) == head  # the whole result
    assert _cached_head({"meta": {"rows_stored": 40}}, 5) is None  # an entry written without rows
    assert _cached_head(hit, 0) is None  # a summary or chart shows no rows


@pytest.fixture
def space(tmp_path: Path) -> Space:
    cfg = DatasetSettings(data_roots=[tmp_path / "shared"])
    made = make_space(tmp_path, "alpha", cfg)
    (made.shared[0] / "cities.csv").write_text("city,pop\nOslo,700\nLima,9000\n")
    return made


@pytest.fixture
def cache(space: Space) -> Cache:
    work = space.work.parent.parent
    return Cache(work / "cache", work / "results", 60, 1 << 20, 16, work / "projects")


def stored(space: Space, query_id: str) -> DatasetQuery:
    path = space.work / "results" / f"{query_id}.parquet"
    path.write_bytes(b"PAR1")
    return DatasetQuery(query_id=query_id, result_path=str(path), created_at=datetime.datetime.now(datetime.UTC))


def test_a_query_is_prepared_with_its_views_files_and_cache_key(space: Space, cache: Cache) -> None:
    sql = "SELECT  city FROM cities -- the cities"
    p = _prepare(sql, ["cities.csv"], {}, space, {}, cache, 1000)
    assert [s.name for s in p.sources] == ["cities", "data"] and p.taken == {"cities", "data"}
    assert p.result_ids == [] and p.result_views == {} and p.hit is None
    assert [f[0] for f in p.fingerprints] == [str(space.shared[0] / "cities.csv")]
    assert p.normalized == "select city from cities"
    # The same query, spelled otherwise, over unchanged files has the same key; a changed file another.
    assert _prepare("select city\nFROM cities", ["cities.csv"], {}, space, {}, cache, 1000).key == p.key
    assert _prepare(sql, ["cities.csv"], {}, space, {}, cache, 10).key != p.key
    cache.put(p.key, {"meta": {"query_id": "q_0123456789abcdef"}})
    assert _prepare(sql, ["cities.csv"], {}, space, {}, cache, 1000).hit is not None
    (space.shared[0] / "cities.csv").write_text("city,pop\nOslo,700\n")
    assert _prepare(sql, ["cities.csv"], {}, space, {}, cache, 1000).key != p.key


def test_stored_results_named_in_files_or_in_the_query_become_views(space: Space, cache: Cache) -> None:
    a, b = "q_00000000000000aa", "q_00000000000000bb"
    named = {a: stored(space, a), b: stored(space, b)}
    p = _prepare(f"SELECT * FROM {a} JOIN {b} USING (city)", [a], {}, space, named, cache, 1000)
    assert p.result_ids == [a, b] and p.sources == []
    assert p.result_views == {a: Path(named[a].result_path), b: Path(named[b].result_path)}
    assert {f[0] for f in p.fingerprints} == {named[a].result_path, named[b].result_path}


def test_a_stored_result_outside_the_project_store_is_not_a_view(space: Space, cache: Cache, tmp_path: Path) -> None:
    q = "q_00000000000000cc"
    outside = tmp_path / f"{q}.parquet"
    outside.write_bytes(b"PAR1")
    named = {q: DatasetQuery(query_id=q, result_path=str(outside))}
    p = _prepare(f"SELECT * FROM {q}", [], {}, space, named, cache, 1000)
    assert p.result_ids == [q] and p.result_views == {} and p.hit is None  # the caller reports it gone


def test_a_refused_query_is_refused_before_it_runs(space: Space, cache: Cache) -> None:
    with pytest.raises(CairnError) as caught:
        _prepare("COPY cities TO '/tmp/x.csv'", ["cities.csv"], {}, space, {}, cache, 1000)
    assert caught.value.code == 4030


def test_a_hit_reads_its_stored_result_by_key_and_a_gone_one_is_a_miss(space: Space, cache: Cache) -> None:
    sql = "SELECT city FROM cities"
    p = _prepare(sql, ["cities.csv"], {}, space, {}, cache, 1000)
    kept = stored(space, "q_00000000000000dd")
    cache.put(
        p.key, {"meta": {"query_id": "q_00000000000000dd", "result_path": "results/alpha/q_00000000000000dd.parquet"}}
    )
    hit = _prepare(sql, ["cities.csv"], {}, space, {}, cache, 1000).hit
    assert hit is not None and hit["meta"]["result_path"] == kept.result_path  # the local file of the key
    Path(kept.result_path).unlink()
    assert _prepare(sql, ["cities.csv"], {}, space, {}, cache, 1000).hit is None
    assert cache.get(p.key) is None  # the entry went with its result


async def test_the_cache_epoch_is_read_while_the_thread_finds_the_files(monkeypatch: pytest.MonkeyPatch) -> None:
    gate, seen = asyncio.Event(), cast(list[object], [])

    async def epoch(ctx: object, space: object) -> int:
        await gate.wait()
        return 7

    def look(box: concurrent.futures.Future[int]) -> str:
        seen.append("files found")
        seen.append(box.result(timeout=30))
        return "prepared"

    monkeypatch.setattr(service_query, "cache_epoch", epoch)
    both = asyncio.ensure_future(service_query._prepared_beside_epoch(cast(Any, None), cast(Any, None), look))
    await eventually(lambda: seen == ["files found"], 30, 0.005, "the thread's start before the epoch came")
    gate.set()
    assert await asyncio.wait_for(both, 30) == (7, "prepared")
    assert seen == ["files found", 7]


async def test_a_failed_epoch_read_ends_the_thread_waiting_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[type[BaseException]] = []

    async def epoch(ctx: object, space: object) -> int:
        raise Unavailable("The database is unreachable")

    def look(box: concurrent.futures.Future[int]) -> str:
        try:
            box.result(timeout=30)
        except BaseException as exc:
            got.append(type(exc))
            raise
        return "prepared"

    monkeypatch.setattr(service_query, "cache_epoch", epoch)
    with pytest.raises(Unavailable):
        await service_query._prepared_beside_epoch(cast(Any, None), cast(Any, None), look)
    assert got == [Unavailable]  # told at once, not after the thread's own 30 s
