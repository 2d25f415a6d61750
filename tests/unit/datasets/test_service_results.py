"""app/datasets/service_results.py: readers of a stored result answered before its file was written
wait for the file (`settled`), and the write's end records the result's cache entry (`store_later`).
Each wait is observed through the condition it waits on, never through elapsed time."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable
from pathlib import Path, PosixPath
from typing import Any

import pytest

from app.core.errors import QueryError
from app.datasets import service_results
from app.datasets.service_results import SETTLE_S, settled, store_later

NOW = datetime.datetime.now


class WatchedPath(PosixPath):
    """A path that counts how often the reader looked for its file."""

    looks = 0

    def is_file(self) -> bool:
        type(self).looks += 1
        return super().is_file()


@pytest.fixture
def watched() -> type[WatchedPath]:
    class Fresh(WatchedPath):
        looks = 0

    return Fresh


async def until(condition: Callable[[], bool], deadline_s: float = 5.0) -> None:
    """Return once `condition()` holds; fail past the deadline."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not condition():
        assert loop.time() < end, "condition not met before the deadline"
        await asyncio.sleep(0.005)


async def finished(task: Awaitable[Any]) -> Any:
    return await asyncio.wait_for(task, 5.0)


async def test_a_reader_waits_for_a_file_another_process_is_writing(tmp_path: Path, watched: type[WatchedPath]) -> None:
    path = watched(tmp_path / "q_0123456789abcdef.parquet")
    reader = asyncio.create_task(settled("q_0123456789abcdef", path, NOW(datetime.UTC)))
    await until(lambda: watched.looks >= 2)  # it looked, found nothing, and looks again
    assert not reader.done()
    path.write_bytes(b"PAR1")
    await finished(reader)
    assert path.is_file()


async def test_a_reader_of_an_old_result_without_its_file_does_not_wait(
    tmp_path: Path, watched: type[WatchedPath]
) -> None:
    old = NOW(datetime.UTC) - datetime.timedelta(seconds=SETTLE_S + 1)
    await finished(settled("q_0123456789abcdef", watched(tmp_path / "gone.parquet"), old))
    assert watched.looks == 1  # looked once, past the settling time: no second look


async def test_a_reader_of_a_result_without_a_time_does_not_look(tmp_path: Path, watched: type[WatchedPath]) -> None:
    await finished(settled("q_0123456789abcdef", watched(tmp_path / "gone.parquet"), None))
    assert watched.looks == 0


async def test_a_reader_in_this_process_waits_for_the_write_it_knows_of(
    tmp_path: Path, watched: type[WatchedPath]
) -> None:
    later: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    remembered: list[bool] = []
    store_later("q_fedcba9876543210", later, lambda: remembered.append(True))
    # Created long ago: only the write this process knows of is waited for.
    old = NOW(datetime.UTC) - datetime.timedelta(hours=1)
    reader = asyncio.create_task(settled("q_fedcba9876543210", watched(tmp_path / "q.parquet"), old))
    await asyncio.sleep(0)  # the reader starts and waits on the write
    assert not reader.done()
    later.set_exception(QueryError("disk full"))
    await finished(reader)  # the write's failure is the reader's to find: the file is missing
    assert watched.looks == 0 and "q_fedcba9876543210" not in service_results._WRITING
    assert remembered == []  # no cache entry for a result whose file was not written


async def test_the_cache_entry_of_an_early_answer_is_written_once_its_file_is() -> None:
    later: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    remembered: list[bool] = []
    store_later("q_00000000000000aa", later, lambda: remembered.append(True))
    assert "q_00000000000000aa" in service_results._WRITING and remembered == []
    later.set_result(None)
    await until(lambda: remembered == [True])
    assert "q_00000000000000aa" not in service_results._WRITING


async def test_a_cancelled_write_forgets_the_result_without_caching_it() -> None:
    later: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    remembered: list[bool] = []
    store_later("q_00000000000000bb", later, lambda: remembered.append(True))
    later.cancel()
    await until(lambda: "q_00000000000000bb" not in service_results._WRITING)
    assert remembered == []
