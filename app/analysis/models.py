"""Tables of the analysis feature: ingested records, findings (+ their embeddings), ingest state."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pgvector.sqlalchemy import SPARSEVEC, Vector
from sqlalchemy import BigInteger, Boolean, Computed, DateTime, ForeignKey, Identity, Integer, String, Text, func
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base


class AnalysisRecord(Base):
    """One upstream row copied into an analysis session (raw JSON, never embedded)."""

    __tablename__ = "analysis_records"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("projects.id", ondelete="CASCADE"))
    analysis_id: Mapped[str] = mapped_column(String(128))
    model: Mapped[str] = mapped_column(String(64))
    record_id: Mapped[str | None] = mapped_column(Text, nullable=True)
    page: Mapped[int | None] = mapped_column(Integer, nullable=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSONB)
    ingested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AnalysisFinding(Base):
    """A qualitative finding (or an automatic page summary) of an analysis session."""

    __tablename__ = "analysis_findings"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("projects.id", ondelete="CASCADE"))
    analysis_id: Mapped[str] = mapped_column(String(128))
    category: Mapped[str] = mapped_column(String(64))
    finding: Mapped[str] = mapped_column(Text)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB)
    source_model: Mapped[str | None] = mapped_column(String(64), nullable=True)
    persistent: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # BM25 over `cairn_text` (analysis_0002_lexical, `app.core.embeddings.lexical`).
    tsv: Mapped[Any] = mapped_column(TSVECTOR, Computed("to_tsvector('cairn_text'::regconfig, finding)"))
    lexical: Mapped[Any] = mapped_column(
        SPARSEVEC(1_000_000_000), Computed("bm25_document(to_tsvector('cairn_text'::regconfig, finding))")
    )


class AnalysisFindingEmbedding(Base):
    """The vector of a finding under one embedding model."""

    __tablename__ = "analysis_finding_embeddings"

    owner_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("analysis_findings.id", ondelete="CASCADE"), primary_key=True
    )
    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    dim: Mapped[int] = mapped_column(Integer)
    embedding: Mapped[list[float]] = mapped_column(Vector())
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class AnalysisIngestState(Base):
    """Where an ingest (one model + filters + page size, or one nested child resource) stopped."""

    __tablename__ = "analysis_ingest_state"

    project_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    analysis_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    state_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    model: Mapped[str] = mapped_column(String(64))
    params: Mapped[dict[str, Any]] = mapped_column(JSONB)
    next_token: Mapped[Any] = mapped_column(JSONB, nullable=True)
    pages_done: Mapped[int] = mapped_column(Integer, default=0)
    complete: Mapped[bool] = mapped_column(Boolean, default=False)
    total_available: Mapped[int | None] = mapped_column(Integer, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AnalysisActRun(Base):
    """One live analysis_act run: what it did, when, by which key, and how it went (analysis_0003_act_runs)."""

    __tablename__ = "analysis_act_runs"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("projects.id", ondelete="CASCADE"))
    analysis_id: Mapped[str] = mapped_column(String(128))
    model: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(16))
    where: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    attributes: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    state: Mapped[str] = mapped_column(String(16))
    key_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    key_name: Mapped[str] = mapped_column(String(200))
    transport: Mapped[str] = mapped_column(String(16))
    total: Mapped[int] = mapped_column(Integer)
    succeeded: Mapped[int] = mapped_column(Integer)
    failed: Mapped[int] = mapped_column(Integer)
    unknown: Mapped[int] = mapped_column(Integer)
    not_attempted: Mapped[int] = mapped_column(Integer)
    already_done: Mapped[int] = mapped_column(Integer)
    deadline_reached: Mapped[bool] = mapped_column(Boolean)
    failed_ids: Mapped[list[str]] = mapped_column(ARRAY(Text))
    unknown_ids: Mapped[list[str]] = mapped_column(ARRAY(Text))
    errors: Mapped[list[dict[str, Any]]] = mapped_column(JSONB)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
