"""app/datasets/service_results.py: readers of a stored result answered before its file was written
wait for the file (`settled`), and the write's end records the result's cache entry (`store_later`).
Each wait is observed through the condition it waits on, never through elapsed time."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from app.core.errors import QueryError
from app.datasets import service_results
from app.datasets.schemas import ExportedFile, ResultPageIn
from app.datasets.service_common import Space
from app.datasets.service_results import (
    SETTLE_S,
    cache_entry_written,
    files_pattern,
    page_cut,
    relative,
    settled,
    store_later,
)
from app.datasets.storage import FolderStore, ObjectInfo

NOW = datetime.datetime.now


KEY = "results/p/q_0123456789abcdef.parquet"


class WatchedStore(FolderStore):
    """The local store, counting how often a reader looked for an object."""

    looks = 0

    def head(self, key: str) -> ObjectInfo | None:
        self.looks += 1
        return super().head(key)


@pytest.fixture
def watched(tmp_path: Path) -> WatchedStore:
    return WatchedStore(tmp_path / "projects", tmp_path / "work")


def space_of(store: FolderStore) -> Space:
    return Space(project="p", folder=store.projects / "p", shared=[], work=store.work / "projects" / "p", store=store)


async def until(condition: Callable[[], bool], deadline_s: float = 5.0) -> None:
    """Return once `condition()` holds; fail past the deadline."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not condition():
        assert loop.time() < end, "condition not met before the deadline"
        await asyncio.sleep(0.005)


async def finished(task: Awaitable[Any]) -> Any:
    return await asyncio.wait_for(task, 5.0)


async def test_a_reader_waits_for_a_file_another_process_is_writing(watched: WatchedStore) -> None:
    reader = asyncio.create_task(settled(space_of(watched), "q_0123456789abcdef", KEY, NOW(datetime.UTC)))
    await until(lambda: watched.looks >= 2)  # it looked, found nothing, and looks again
    assert not reader.done()
    watched.put_bytes(KEY, b"PAR1")
    await finished(reader)
    assert watched.fetch(KEY) is not None


async def test_a_reader_of_an_old_result_without_its_file_does_not_wait(watched: WatchedStore) -> None:
    old = NOW(datetime.UTC) - datetime.timedelta(seconds=SETTLE_S + 1)
    await finished(settled(space_of(watched), "q_0123456789abcdef", KEY, old))
    assert watched.looks == 0  # past the settling time: not looked for


async def test_a_reader_of_a_result_without_a_time_does_not_look(watched: WatchedStore) -> None:
    await finished(settled(space_of(watched), "q_0123456789abcdef", KEY, None))
    assert watched.looks == 0


async def test_a_reader_of_a_result_stored_before_the_object_store_looks_at_its_path(tmp_path: Path) -> None:
    legacy = tmp_path / "q_0123456789abcdef.parquet"
    legacy.write_bytes(b"PAR1")
    store = FolderStore(tmp_path / "projects", tmp_path / "work")
    await finished(settled(space_of(store), "q_0123456789abcdef", str(legacy), NOW(datetime.UTC)))


async def test_a_reader_in_this_process_waits_for_the_write_it_knows_of(watched: WatchedStore) -> None:
    later: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    remembered: list[bool] = []
    store_later("q_fedcba9876543210", later, lambda: remembered.append(True), lambda: None)
    # Created long ago: only the write this process knows of is waited for.
    old = NOW(datetime.UTC) - datetime.timedelta(hours=1)
    reader = asyncio.create_task(settled(space_of(watched), "q_fedcba9876543210", KEY, old))
    await asyncio.sleep(0)  # the reader starts and waits on the write
    assert not reader.done()
    later.set_exception(QueryError("disk full"))
    await finished(reader)  # the write's failure is the reader's to find: the file is missing
    assert watched.looks == 0 and "q_fedcba9876543210" not in service_results._WRITING
    assert remembered == []  # no cache entry for a result whose file was not written


async def test_the_cache_entry_of_an_early_answer_is_written_once_its_file_is() -> None:
    later: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    remembered: list[bool] = []
    published: list[bool] = []
    store_later("q_00000000000000aa", later, lambda: remembered.append(True), lambda: published.append(True))
    assert "q_00000000000000aa" in service_results._WRITING and remembered == []
    later.set_result(None)
    await until(lambda: remembered == [True])
    assert published == [True]  # the file went to the store before its cache entry was written
    await until(lambda: "q_00000000000000aa" not in service_results._WRITING)  # forgotten once all is done


async def test_the_same_query_asked_again_waits_for_the_cache_entry_being_written() -> None:
    later: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    remembered: list[bool] = []
    store_later("q_00000000000000cc", later, lambda: remembered.append(True), lambda: None, "key-cc")
    assert not await cache_entry_written("another-key")  # nothing of that key is being written
    asking = asyncio.create_task(cache_entry_written("key-cc"))
    await asyncio.sleep(0)
    assert not asking.done()  # it waits while the file and its entry are written
    later.set_result(None)
    assert await asyncio.wait_for(asking, 10) and remembered == [True]  # the entry is there when it returns
    await until(lambda: "key-cc" not in service_results._REMEMBERING)
    assert not await cache_entry_written("key-cc")


async def test_a_cancelled_write_forgets_the_result_without_caching_it() -> None:
    later: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    remembered: list[bool] = []
    store_later("q_00000000000000bb", later, lambda: remembered.append(True), lambda: None)
    later.cancel()
    await until(lambda: "q_00000000000000bb" not in service_results._WRITING)
    assert remembered == []


def test_a_partitioned_export_is_named_by_one_pattern(tmp_path: Path) -> None:
    target = tmp_path / "exports" / "by_c"
    files = [ExportedFile(path=str(target / f"c={v}" / "data_0.csv.gz"), size_bytes=9) for v in "ab"]
    assert files_pattern(tmp_path, target, "c", files) == "exports/by_c/c=*/*.csv.gz"
    deeper = [ExportedFile(path=str(target / "c=a" / "d=1" / "data_0.parquet"), size_bytes=9)]
    assert files_pattern(tmp_path, target, "c", deeper) == "exports/by_c/**/*.parquet"


def test_export_paths_are_relative_to_the_project_folder(tmp_path: Path) -> None:
    assert relative(tmp_path, tmp_path / "exports" / "q.csv") == "exports/q.csv"
    assert (
        relative(tmp_path, str(tmp_path / "exports" / "by_c" / "c=a" / "data_0.csv")) == "exports/by_c/c=a/data_0.csv"
    )
    with pytest.raises(ValueError):
        relative(tmp_path / "project", tmp_path / "other" / "q.csv")


def test_a_cut_page_names_the_next_page() -> None:
    args = ResultPageIn(query_id="q_0123456789abcdef", offset=10, limit=50, max_tokens=300)
    cut = page_cut(args, 300, 20, 50, 1000)
    assert (cut.reason, cut.left_out) == ("max_tokens 300", "rows 31-60 of 1000")
    assert cut.next_call is not None and cut.next_call.args == {"offset": 30}
    none = page_cut(args, 300, 0, 50, 1000)
    assert none.next_call is not None and none.next_call.args == {"offset": 10, "max_tokens": 600}
