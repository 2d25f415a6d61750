"""Every SQL statement of the datasets feature. Every statement names the caller's project: dataset
names and stored results belong to one project."""

from __future__ import annotations

import json
import uuid
from typing import Any, cast

from sqlalchemy import Table, delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.repository import Repository
from app.datasets.models import Dataset, DatasetCacheEpoch, DatasetQuery


class DatasetRepository(Repository):
    """Named datasets of one project."""

    def __init__(self, session: AsyncSession, project: str) -> None:
        super().__init__(session)
        self.project = project

    async def get(self, name: str) -> Dataset | None:
        """The dataset called `name`."""
        return await self.session.scalar(select(Dataset).where(Dataset.project == self.project, Dataset.name == name))

    async def get_many(self, names: list[str]) -> dict[str, Dataset]:
        """Datasets by name (detached objects: plain SQL, which `execute_query` runs on the driver)."""
        if not names:
            return {}
        rows = await self.rows(
            f"SELECT {_DATASET_COLUMNS} FROM datasets WHERE project = :project AND name = ANY(:names)",
            {"project": self.project, "names": names},
            into=Dataset,
        )
        return {d.name: d for d in rows}

    async def upsert(
        self,
        *,
        name: str,
        path: str,
        fmt: str,
        size_bytes: int,
        description: str,
        source: str,
        created_by: str | None,
        replace: bool,
    ) -> tuple[Dataset, bool]:
        """Insert, or (when `replace`) update the dataset called `name`. Returns (row, created);
        without `replace` an existing row is returned unchanged."""
        values = dict(
            path=path,
            format=fmt,
            size_bytes=size_bytes,
            description=description,
            source=source,
            created_by=created_by,
        )
        stmt = insert(Dataset).values(id=uuid.uuid4(), project=self.project, name=name, **values)
        keys = [Dataset.project, Dataset.name]
        if replace:
            stmt = stmt.on_conflict_do_update(index_elements=keys, set_={**values, "updated_at": func.now()})
        else:
            stmt = stmt.on_conflict_do_nothing(index_elements=keys)
        before = await self.get(name)
        await self.session.execute(stmt)
        created = before is None
        await self.session.flush()
        ds = await self.session.scalar(
            select(Dataset)
            .where(Dataset.project == self.project, Dataset.name == name)
            .execution_options(populate_existing=True)
        )
        assert ds is not None
        return ds, created

    async def list(self, limit: int, offset: int) -> tuple[list[Dataset], int]:
        """Datasets by name, and the total."""
        mine = Dataset.project == self.project
        rows = await self.session.scalars(
            select(Dataset).where(mine).order_by(Dataset.name).limit(limit).offset(offset)
        )
        total = int(await self.session.scalar(select(func.count()).select_from(Dataset).where(mine)) or 0)
        return list(rows), total

    async def delete(self, name: str) -> Dataset | None:
        """Remove a dataset from the registry; returns the removed row."""
        row = await self.get(name)
        if row is not None:
            await self.session.execute(delete(Dataset).where(Dataset.project == self.project, Dataset.name == name))
        return row


# One Core statement built once, its values bound per call: the ORM's bulk-insert path, and building
# the statement with `.values()` on each call, both cost more on every stored result. Plain SQL, as
# `execute_query` runs on the driver (`Operation.plain`): its JSON columns are sent as their text.
_SAVE = (
    "INSERT INTO dataset_queries (query_id, project, sql, files, columns, rows_stored, rows_total, result_path,"
    " cache_key, label, created_by) VALUES (:query_id, :project, :sql, CAST(:files AS jsonb),"
    " CAST(:columns AS jsonb), :rows_stored, :rows_total, :result_path, :cache_key, :label, :created_by)"
    " ON CONFLICT (query_id) DO NOTHING"
)
_QUERY_COLUMNS = ", ".join(c.name for c in cast(Table, DatasetQuery.__table__).columns)
_DATASET_COLUMNS = ", ".join(c.name for c in cast(Table, Dataset.__table__).columns)


class QueryRepository(Repository):
    """Metadata of the stored query results of one project."""

    def __init__(self, session: AsyncSession, project: str) -> None:
        super().__init__(session)
        self.project = project

    async def save(self, values: dict[str, Any]) -> None:
        """Record a result (no-op when the query_id exists)."""
        row = {"cache_key": None, "label": None, "created_by": None, **values, "project": self.project}
        row["files"], row["columns"] = json.dumps(row["files"]), json.dumps(row["columns"])
        await self.execute(_SAVE, row)

    async def get(self, query_id: str) -> DatasetQuery | None:
        """A stored result's metadata (None when it belongs to another project)."""
        return await self.session.scalar(
            select(DatasetQuery).where(DatasetQuery.query_id == query_id, DatasetQuery.project == self.project)
        )

    async def get_many(self, ids: list[str]) -> dict[str, DatasetQuery]:
        """Stored results by id (detached objects: plain SQL, which `execute_query` runs on the driver)."""
        if not ids:
            return {}
        rows = await self.rows(
            f"SELECT {_QUERY_COLUMNS} FROM dataset_queries WHERE query_id = ANY(:ids) AND project = :project",
            {"ids": ids, "project": self.project},
            into=DatasetQuery,
        )
        return {q.query_id: q for q in rows}


class CacheEpochRepository(Repository):
    """The result cache's epoch of one project (see `DatasetCacheEpoch`)."""

    def __init__(self, session: AsyncSession, project: str) -> None:
        super().__init__(session)
        self.project = project

    async def current(self) -> int:
        """The project's epoch (0 before its first invalidation)."""
        # Text, not an ORM select: every execute_query reads it, and the ORM's statement costs more CPU.
        value = await self.scalar(
            "SELECT epoch FROM dataset_cache_epochs WHERE project = :project", {"project": self.project}
        )
        return int(value or 0)

    async def advance(self) -> int:
        """Raise the project's epoch by one; returns the new epoch."""
        stmt = (
            insert(DatasetCacheEpoch)
            .values(project=self.project, epoch=1)
            .on_conflict_do_update(
                index_elements=[DatasetCacheEpoch.project],
                set_={"epoch": DatasetCacheEpoch.epoch + 1, "updated_at": func.now()},
            )
            .returning(DatasetCacheEpoch.epoch)
        )
        return int((await self.session.execute(stmt)).scalar_one())
