"""Tables of the datasets feature: the registry of named datasets and the metadata of stored query
results. The data itself stays in files read by DuckDB."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, DateTime, Index, String, Text, UniqueConstraint, func
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base


class Dataset(Base):
    """A dataset registered by name (uploaded, or a path inside a data root); names are per project."""

    __tablename__ = "datasets"
    __table_args__ = (UniqueConstraint("project", "name", name="uq_datasets_project_name"),)

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    project: Mapped[str] = mapped_column(String(128), nullable=False, server_default="default")
    name: Mapped[str] = mapped_column(String(128), nullable=False)
    path: Mapped[str] = mapped_column(Text, nullable=False)
    format: Mapped[str] = mapped_column(String(16), nullable=False)
    size_bytes: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    description: Mapped[str] = mapped_column(Text, nullable=False, default="", server_default="")
    source: Mapped[str] = mapped_column(String(16), nullable=False, default="registered")
    created_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class DatasetQuery(Base):
    """A query result kept server-side under its query_id (rows live in a Parquet file), readable only
    from the project that ran it."""

    __tablename__ = "dataset_queries"
    __table_args__ = (Index("ix_dataset_queries_created_at", "created_at"),)

    query_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project: Mapped[str] = mapped_column(String(128), nullable=False, server_default="default")
    sql: Mapped[str] = mapped_column(Text, nullable=False)
    files: Mapped[list[Any]] = mapped_column(JSONB, nullable=False)
    columns: Mapped[list[Any]] = mapped_column(JSONB, nullable=False)
    rows_stored: Mapped[int] = mapped_column(BigInteger, nullable=False)
    rows_total: Mapped[int] = mapped_column(BigInteger, nullable=False)
    result_path: Mapped[str] = mapped_column(Text, nullable=False)
    cache_key: Mapped[str | None] = mapped_column(String(64), nullable=True)
    label: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class DatasetCacheEpoch(Base):
    """The result cache's epoch of one project: `cache_invalidate` raises it, and every host re-reads
    from the shared store any cache entry it remembered in an older epoch (the invalidation reaches
    every host through the database, with no LISTEN/NOTIFY)."""

    __tablename__ = "dataset_cache_epochs"

    project: Mapped[str] = mapped_column(String(128), primary_key=True)
    epoch: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
