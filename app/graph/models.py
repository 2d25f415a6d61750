"""Tables of the knowledge graph (migrations graph_0001 to graph_0003 create them; SQL lives in the repositories).

The side table of the entities' lexical index and its pending list (graph_0006) are declared by their migration alone.

Generated columns (`search_text`, `tsv`, `lexical`) and the vector columns are declared for reference only.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Any

from pgvector.sqlalchemy import SPARSEVEC
from sqlalchemy import BigInteger, Boolean, Date, DateTime, Float, ForeignKey, Integer, Text, func
from sqlalchemy.dialects.postgresql import TSVECTOR, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base


class GraphEntity(Base):
    """A node: unique name per project, a type and a lifecycle status."""

    __tablename__ = "graph_entities"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(Text)
    entity_type: Mapped[str] = mapped_column(Text, server_default="Generic")
    status: Mapped[str] = mapped_column(Text, server_default="active")
    obs_text: Mapped[str] = mapped_column(Text, server_default="")
    search_text: Mapped[str] = mapped_column(Text)
    tsv: Mapped[str] = mapped_column(TSVECTOR)
    lexical: Mapped[Any] = mapped_column(SPARSEVEC(1_000_000_000))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class GraphObservation(Base):
    """A fact about an entity; superseded facts are kept for history."""

    __tablename__ = "graph_observations"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    entity_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("graph_entities.id", ondelete="CASCADE"))
    content: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(Text, server_default="generic")
    supersedes: Mapped[int | None] = mapped_column(BigInteger, ForeignKey("graph_observations.id"))
    superseded_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    similarity_flag: Mapped[int] = mapped_column(Integer, server_default="0")
    duplicate_of: Mapped[int | None] = mapped_column(BigInteger, ForeignKey("graph_observations.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class GraphRelation(Base):
    """A typed edge; ending it keeps the row (active = false)."""

    __tablename__ = "graph_relations"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("projects.id", ondelete="CASCADE"))
    from_entity: Mapped[int] = mapped_column(BigInteger, ForeignKey("graph_entities.id", ondelete="CASCADE"))
    to_entity: Mapped[int] = mapped_column(BigInteger, ForeignKey("graph_entities.id", ondelete="CASCADE"))
    relation_type: Mapped[str] = mapped_column(Text)
    context: Mapped[str | None] = mapped_column(Text)
    active: Mapped[bool] = mapped_column(Boolean, server_default="true")
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class GraphReflection(Base):
    """A narrative note about an entity, a relation, a session or the whole graph."""

    __tablename__ = "graph_reflections"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("projects.id", ondelete="CASCADE"))
    target_type: Mapped[str] = mapped_column(Text)
    target_id: Mapped[int | None] = mapped_column(BigInteger)
    author: Mapped[str] = mapped_column(Text, server_default="sofia")
    content: Mapped[str] = mapped_column(Text)
    mood: Mapped[str | None] = mapped_column(Text)
    tsv: Mapped[str] = mapped_column(TSVECTOR)
    lexical: Mapped[Any] = mapped_column(SPARSEVEC(1_000_000_000))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class GraphEntityAccess(Base):
    """How often and how recently an entity appeared in search_semantic results."""

    __tablename__ = "graph_entity_access"

    entity_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("graph_entities.id", ondelete="CASCADE"), primary_key=True
    )
    access_count: Mapped[int] = mapped_column(Integer, server_default="1")
    last_access: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class GraphAccessLog(Base):
    """Accesses per entity per calendar day."""

    __tablename__ = "graph_access_log"

    entity_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("graph_entities.id", ondelete="CASCADE"), primary_key=True
    )
    access_date: Mapped[date] = mapped_column(Date, primary_key=True)
    access_count: Mapped[int] = mapped_column(Integer, server_default="1")


class GraphCooccurrence(Base):
    """Two entities returned together (entity_a_id < entity_b_id)."""

    __tablename__ = "graph_cooccurrences"

    entity_a_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("graph_entities.id", ondelete="CASCADE"), primary_key=True
    )
    entity_b_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("graph_entities.id", ondelete="CASCADE"), primary_key=True
    )
    co_count: Mapped[int] = mapped_column(Integer, server_default="1")
    last_co: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class GraphSearchEvent(Base):
    """One search_semantic call."""

    __tablename__ = "graph_search_events"

    event_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    project_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("projects.id", ondelete="CASCADE"))
    query_text: Mapped[str] = mapped_column(Text)
    query_hash: Mapped[str] = mapped_column(Text)
    timestamp: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    treatment: Mapped[int] = mapped_column(Integer)
    k_limit: Mapped[int] = mapped_column(Integer)
    num_results: Mapped[int] = mapped_column(Integer)
    duration_ms: Mapped[float | None] = mapped_column(Float)
    engine_used: Mapped[str] = mapped_column(Text)


class GraphSearchResult(Base):
    """One ranked result of a search event with every score component."""

    __tablename__ = "graph_search_results"

    result_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    event_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("graph_search_events.event_id", ondelete="CASCADE"))
    entity_id: Mapped[int | None] = mapped_column(BigInteger, ForeignKey("graph_entities.id", ondelete="SET NULL"))
    entity_name: Mapped[str] = mapped_column(Text)
    rank: Mapped[int] = mapped_column(Integer)
    limbic_score: Mapped[float | None] = mapped_column(Float)
    cosine_sim: Mapped[float | None] = mapped_column(Float)
    text_score: Mapped[float | None] = mapped_column(Float)
    importance: Mapped[float | None] = mapped_column(Float)
    temporal: Mapped[float | None] = mapped_column(Float)
    cooc_boost: Mapped[float | None] = mapped_column(Float)
    baseline_rank: Mapped[int | None] = mapped_column(Integer)


class GraphImplicitFeedback(Base):
    """A search result re-opened within the feedback window (counts as relevant)."""

    __tablename__ = "graph_implicit_feedback"

    feedback_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    event_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("graph_search_events.event_id", ondelete="CASCADE"))
    entity_id: Mapped[int | None] = mapped_column(BigInteger)
    entity_name: Mapped[str] = mapped_column(Text)
    re_accessed: Mapped[int] = mapped_column(Integer, server_default="1")
    access_delta: Mapped[int | None] = mapped_column(Integer)
    session_id: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
