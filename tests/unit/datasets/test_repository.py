"""app/datasets/repository.py on a migrated database of its own: every statement keeps to its project.
Datasets are inserted, kept or replaced by name, listed by name with their total and removed; stored
results are saved once and read back only by their own project."""

from __future__ import annotations

from typing import Any

from app.core.db import Database
from app.datasets.repository import CacheEpochRepository, DatasetRepository, QueryRepository
from tests.support.databases import database_fixture

db = database_fixture(["datasets"])


def entry(path: str, *, replace: bool = False, description: str = "") -> dict[str, Any]:
    return dict(
        path=path,
        fmt="csv",
        size_bytes=10,
        description=description,
        source="registered",
        created_by="k",
        replace=replace,
    )


async def test_datasets_are_kept_or_replaced_by_name_per_project(db: Database) -> None:
    async with db.transaction() as s:
        mine, theirs = DatasetRepository(s, "lab"), DatasetRepository(s, "other")
        first, created = await mine.upsert(name="sales", **entry("/a.csv", description="first"))
        assert created and (first.project, first.path, first.format, first.description) == (
            "lab",
            "/a.csv",
            "csv",
            "first",
        )
        kept, created_again = await mine.upsert(name="sales", **entry("/b.csv"))
        assert not created_again and kept.id == first.id and kept.path == "/a.csv"  # without replace: unchanged
        replaced, made = await mine.upsert(name="sales", **entry("/c.csv", replace=True, description="new"))
        assert not made and replaced.id == first.id and (replaced.path, replaced.description) == ("/c.csv", "new")
        other, other_created = await theirs.upsert(name="sales", **entry("/o.csv"))
        assert other_created and other.id != first.id  # the same name in another project
        assert (await mine.get("sales")) is not None and await mine.get("nope") is None
        assert set(await mine.get_many(["sales", "nope"])) == {"sales"} and await mine.get_many([]) == {}


async def test_datasets_are_listed_by_name_and_removed(db: Database) -> None:
    async with db.transaction() as s:
        repo = DatasetRepository(s, "listing")
        for name in ("c", "a", "b"):
            await repo.upsert(name=name, **entry(f"/{name}.csv"))
        page, total = await repo.list(2, 0)
        assert [d.name for d in page] == ["a", "b"] and total == 3
        assert [d.name for d in (await repo.list(2, 2))[0]] == ["c"]
        removed = await repo.delete("b")
        assert removed is not None and removed.path == "/b.csv"
        assert await repo.delete("b") is None and await DatasetRepository(s, "elsewhere").delete("a") is None
        assert [d.name for d in (await repo.list(10, 0))[0]] == ["a", "c"]


async def test_stored_results_are_saved_once_and_read_by_their_project(db: Database) -> None:
    row = dict(
        query_id="q_0000000000000001",
        sql="SELECT 1",
        files=["a.csv"],
        columns=[{"name": "x"}],
        rows_stored=1,
        rows_total=1,
        result_path="/r/1.parquet",
        cache_key=None,
        label="first",
        created_by="k",
    )
    async with db.transaction() as s:
        mine = QueryRepository(s, "lab")
        await mine.save(row)
        await mine.save({**row, "label": "second"})  # the same id: nothing changes
        await QueryRepository(s, "other").save({**row, "query_id": "q_0000000000000002"})
        found = await mine.get("q_0000000000000001")
        assert found is not None and found.label == "first" and found.files == ["a.csv"] and found.project == "lab"
        assert await mine.get("q_0000000000000002") is None  # another project's result
        assert set(await mine.get_many(["q_0000000000000001", "q_0000000000000002"])) == {"q_0000000000000001"}
        assert await mine.get_many([]) == {}


async def test_the_cache_epoch_starts_at_zero_and_rises_per_project(db: Database) -> None:
    async with db.transaction() as s:
        lab = CacheEpochRepository(s, "epoch-lab")
        assert await lab.current() == 0
        assert await lab.advance() == 1 and await lab.advance() == 2
        assert await lab.current() == 2
        assert await CacheEpochRepository(s, "epoch-other").current() == 0
    async with db.transaction() as s:
        assert await CacheEpochRepository(s, "epoch-lab").current() == 2  # committed: every host reads it
