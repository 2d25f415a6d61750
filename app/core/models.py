"""Core tables: projects, API keys, the per-model embedding bookkeeping, the auth lock and the log of
applied revisions."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Identity,
    Index,
    Integer,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.dialects.postgresql import (
    JSONB,
    UUID,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base


class Project(Base):
    """A named scope for memories, graphs and findings."""

    __tablename__ = "projects"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(128), unique=True, nullable=False)
    description: Mapped[str] = mapped_column(Text, nullable=False, default="", server_default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class ApiKey(Base):
    """A bearer key; only its SHA-256 hash is stored."""

    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(128), nullable=False, default="", server_default="")
    prefix: Mapped[str] = mapped_column(String(16), nullable=False)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    scopes: Mapped[list[str]] = mapped_column(ARRAY(String(16)), nullable=False)
    project: Mapped[str | None] = mapped_column(String(128), nullable=True)
    # What plain /mcp lists for this key (None: the server's default)
    toolsets: Mapped[list[str] | None] = mapped_column(ARRAY(String(32)), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class EmbeddingModel(Base):
    """An embedding model whose vectors are (or were) stored; vectors are kept per model."""

    __tablename__ = "embedding_models"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    provider: Mapped[str] = mapped_column(String(32), nullable=False)
    dimension: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    last_active_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class AuditEntry(Base):
    """One write-scope or destructive call: who (key id, never the key), what, where, counts, when."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_at", "at"), Index("ix_audit_log_key_id_at", "key_id", "at"))

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    key_id: Mapped[str | None] = mapped_column(String(64))
    key_name: Mapped[str | None] = mapped_column(String(128))
    operation: Mapped[str] = mapped_column(String(64), nullable=False)
    transport: Mapped[str] = mapped_column(String(8), nullable=False)
    project: Mapped[str | None] = mapped_column(String(128))
    outcome: Mapped[str] = mapped_column(String(16), nullable=False)
    error_code: Mapped[int | None] = mapped_column(Integer)
    counts: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, default=dict)
    request_id: Mapped[str | None] = mapped_column(String(64))


class EmbeddingJob(Base):
    """A row of the embedding queue: the vector of `(target, ref)` under `model` is missing or stale.

    Writes insert (or bump `version` of) a job in their own transaction; workers lease a batch with
    ``FOR UPDATE SKIP LOCKED``, embed outside any transaction, then store the vectors and delete the
    jobs whose `version` is still the one they leased (a newer write re-queues the row)."""

    __tablename__ = "embedding_queue"
    __table_args__ = (
        UniqueConstraint("target", "ref", "model", name="uq_embedding_queue_target_ref_model"),
        Index("ix_embedding_queue_model_not_before", "model", "not_before"),
        Index("ix_embedding_queue_model_owner", "model", "owner", "project", "not_before", "id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    target: Mapped[str] = mapped_column(String(64), nullable=False)
    ref: Mapped[str] = mapped_column(String(64), nullable=False)
    model: Mapped[str] = mapped_column(String(200), nullable=False)
    version: Mapped[int] = mapped_column(Integer, nullable=False, server_default="1")
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    enqueued_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    not_before: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    leased_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
    # Who queued the row (core_0010): the caller's key and project; '' for rows no call queued
    owner: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    project: Mapped[str] = mapped_column(Text, nullable=False, server_default="")


class AuthLock(Base):
    """One row once the database has had an API key: no host of it starts open from then on, even
    after every key is revoked (docs/reliability.md)."""

    __tablename__ = "auth_lock"
    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True, server_default="1")
    locked_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    reason: Mapped[str] = mapped_column(String(200), nullable=False)


class SchemaRevision(Base):
    """An applied Alembic revision as the build that applied it described it, read by builds that do
    not have its file (`app.core.migrations.newer_schema`)."""

    __tablename__ = "schema_revisions"

    revision: Mapped[str] = mapped_column(String(64), primary_key=True)
    down_revisions: Mapped[list[str]] = mapped_column(ARRAY(String(64)), nullable=False)
    older_code_may_run: Mapped[bool] = mapped_column(Boolean, nullable=False)
    build: Mapped[str] = mapped_column(String(64), nullable=False)
    applied_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
