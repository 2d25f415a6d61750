"""Inputs and outputs of the graph operations.

The nine reference-compatible tools keep the reference memory server's argument and result shapes
(`{name, entityType, observations}`, `{from, to, relationType}`); every other field is optional.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from app.core.schemas import (
    EMBEDDING_STATE_DESCRIPTION,
    PROJECT_NAME,
    EmbeddingState,
    StrictModel,
    wait_for_embedding_field,
)

MAX_OBSERVATION_CHARS = 8000
MAX_NAME_CHARS = 512

Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_NAME_CHARS)]
TypeName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)]
ObservationText = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_OBSERVATION_CHARS)
]
# The seed's lifecycle statuses are Spanish; replies name them in English and inputs accept both.
SEED_STATUSES = {"activo": "active", "archivado": "archived"}


def english_status(value: str) -> str:
    """The English status for one of the seed's Spanish ones (any case); any other status as given."""
    return SEED_STATUSES.get(value.lower(), value)


Status = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=32), AfterValidator(english_status)
]
ProjectField = Field(
    default=None, pattern=PROJECT_NAME, description="Project (default: the key's project or 'default')"
)


class ProjectIn(StrictModel):
    """Base of graph inputs: an optional project."""

    project: str | None = ProjectField


# ---- reference-compatible shapes -------------------------------------------------------------


class EntityIn(StrictModel):
    """An entity to create."""

    name: Name = Field(description="Unique entity name")
    entityType: TypeName = Field(default="Generic", description="Entity type")
    observations: list[ObservationText] = Field(default_factory=list, max_length=500)
    status: Status = Field(default="active", description="Lifecycle status: active, archived (or activo, archivado)")


class RelationIn(StrictModel):
    """A relation between two existing entities (`from`/`to` are entity names)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, populate_by_name=True)

    from_entity: Name = Field(alias="from", description="Name of the source entity")
    to_entity: Name = Field(alias="to", description="Name of the target entity")
    relationType: TypeName = Field(description="Relation type, in active voice")
    context: str | None = Field(default=None, max_length=2000, description="Optional narrative context")


class EntityOut(BaseModel):
    """An entity in the reference shape."""

    name: str
    entityType: str
    observations: list[str]


class RelationOut(BaseModel):
    """A relation in the reference shape."""

    model_config = ConfigDict(populate_by_name=True)

    from_entity: str = Field(serialization_alias="from", validation_alias="from")
    to_entity: str = Field(serialization_alias="to", validation_alias="to")
    relationType: str


class CreateEntitiesIn(ProjectIn):
    """Arguments of create_entities."""

    entities: list[EntityIn] = Field(max_length=500)
    wait_for_embedding: bool | None = wait_for_embedding_field()


class CreateEntitiesOut(BaseModel):
    """The entities that were created (names that already existed are listed in `skipped`)."""

    entities: list[EntityOut]
    skipped: list[str] = Field(default_factory=list, description="Names that already existed")
    embedding: EmbeddingState = Field(default="done", description=EMBEDDING_STATE_DESCRIPTION)


class CreateRelationsIn(ProjectIn):
    """Arguments of create_relations."""

    relations: list[RelationIn] = Field(max_length=1000)


class CreateRelationsOut(BaseModel):
    """The relations that were created (existing ones are listed in `skipped`)."""

    relations: list[RelationOut]
    skipped: list[RelationOut] = Field(default_factory=list, description="Relations that already existed")


class ObservationAddIn(StrictModel):
    """Observations to add to one entity."""

    entityName: Name
    contents: list[ObservationText] = Field(max_length=500)
    kind: TypeName = Field(default="generic", description="Observation kind, e.g. generic, milestone, risk")


class AddObservationsIn(ProjectIn):
    """Arguments of add_observations."""

    observations: list[ObservationAddIn] = Field(max_length=500)
    wait_for_embedding: bool | None = wait_for_embedding_field()


class AddedObservations(BaseModel):
    """Observations actually added to one entity (already present ones are skipped)."""

    entityName: str
    addedObservations: list[str]


class AddObservationsOut(BaseModel):
    """Result of add_observations."""

    results: list[AddedObservations]
    embedding: EmbeddingState = Field(default="done", description=EMBEDDING_STATE_DESCRIPTION)


class DeleteEntitiesIn(ProjectIn):
    """Arguments of delete_entities."""

    entityNames: list[Name] = Field(max_length=1000)


class ObservationDeletionIn(StrictModel):
    """Observations to delete from one entity."""

    entityName: Name
    observations: list[str] = Field(max_length=1000)


class DeleteObservationsIn(ProjectIn):
    """Arguments of delete_observations."""

    deletions: list[ObservationDeletionIn] = Field(max_length=500)
    wait_for_embedding: bool | None = wait_for_embedding_field()


class DeleteRelationsIn(ProjectIn):
    """Arguments of delete_relations."""

    relations: list[RelationIn] = Field(max_length=1000)


class SuccessOut(BaseModel):
    """Result of the delete tools."""

    success: bool
    message: str


class TypeCount(BaseModel):
    """Entities of one type."""

    entityType: str
    count: int


class StatusCount(BaseModel):
    """Entities of one lifecycle status."""

    status: str
    count: int


class ImportantEntity(BaseModel):
    """An entity ranked by access count and size."""

    name: str
    entityType: str
    access_count: int
    observations: int


class GraphSummary(BaseModel):
    """Counts by type and the most important entities."""

    entity_count: int
    observation_count: int
    relation_count: int
    by_type: list[TypeCount]
    top_entities: list[ImportantEntity]


class ReadGraphIn(ProjectIn):
    """Arguments of read_graph."""

    mode: Literal["page", "summary"] = Field(
        default="page",
        description="page: entities and relations; summary: counts by type and the most important entities",
    )
    offset: int = Field(default=0, ge=0, description="Entities to skip (from next_offset)")
    limit: int = Field(default=50, ge=1, le=200, description="Entities per page at most")
    token_budget: int = Field(default=4000, ge=200, le=20000, description="Approximate token cap of the page")
    entity_type: str | None = Field(default=None, max_length=128, description="Only entities of this type")
    max_observations: int = Field(default=20, ge=0, le=200, description="Observations shown per entity")


class ReadGraphOut(BaseModel):
    """One bounded page of the graph (relations listed with their source entity) or a summary."""

    entities: list[EntityOut] = Field(default_factory=list)
    relations: list[RelationOut] = Field(default_factory=list)
    total_entities: int
    total_relations: int
    next_offset: int | None = None
    truncated: bool = Field(default=False, description="True when observations or relations were cut")
    tokens: int = Field(default=0, description="Approximate tokens of this page")
    summary: GraphSummary | None = None


class SearchNodesIn(ProjectIn):
    """Arguments of search_nodes."""

    query: str = Field(
        min_length=1,
        max_length=2048,
        description="Text matched (case-insensitively) against names, types and observations",
    )
    limit: int = Field(default=20, ge=1, le=100)
    offset: int = Field(default=0, ge=0)
    token_budget: int = Field(default=4000, ge=200, le=20000)
    max_observations: int = Field(default=20, ge=0, le=200)


class GraphOut(BaseModel):
    """Entities and the relations touching them, bounded."""

    entities: list[EntityOut]
    relations: list[RelationOut]
    total: int = Field(default=0, description="Matching entities in all")
    next_offset: int | None = None
    truncated: bool = False
    not_found: list[str] = Field(default_factory=list)


REPLY_TOKENS = "Tokens of this reply as sent: its compact JSON, this field included (the embedding model's tokenizer)"


class SearchNodesOut(GraphOut):
    """Result of search_nodes: matching entities and the relations touching them, bounded."""

    tokens: int = Field(default=0, description=REPLY_TOKENS)


class OpenNodesIn(ProjectIn):
    """Arguments of open_nodes."""

    names: list[Name] = Field(max_length=100)
    max_observations: int = Field(default=100, ge=0, le=500)
    session_id: str | None = Field(default=None, max_length=128, description="Caller's session, for feedback")


# ---- extended tools ------------------------------------------------------------------------------


class SearchSemanticIn(ProjectIn):
    """Arguments of search_semantic."""

    query: str = Field(min_length=1, max_length=2048)
    limit: int = Field(default=10, ge=1, le=50)
    treatment: Literal["auto", "limbic", "baseline"] = Field(
        default="auto", description="auto: assigned by the configured A/B ratio"
    )
    entity_type: str | None = Field(default=None, max_length=128)
    include_observations: int = Field(default=3, ge=0, le=20, description="Observations shown per result")
    include_archived: bool = Field(default=False, description="Also return archived entities")
    semantic_floor: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Cosine similarity a result found by meaning must reach (default: fitted to the model)",
    )
    min_text_coverage: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Share of the query's word weight a result found by words must hold (default: the server's)",
    )
    explain: bool = Field(
        default=False,
        description="Add each result's ranking internals: rank, baseline rank, every score component, access count",
    )


class SemanticHit(BaseModel):
    """One ranked entity: what an agent reads, and with `explain` every score component (else left out)."""

    name: str
    entityType: str
    status: str
    observations: list[str]
    score: float = Field(description="What it was ranked by: limbic_score under limbic, relevance under baseline")
    embedding: Literal["pending"] | None = Field(
        default=None, exclude_if=lambda v: v is None, description="pending: found by text; its vector is not made yet"
    )
    matched_by: Literal["meaning", "text", "both"] | None = Field(
        default=None,
        description="What made it an answer: a cosine at or above the semantic floor, a text coverage at or above "
        "min_text_coverage, or both",
    )
    # With explain only (left out of the reply otherwise).
    rank: int | None = Field(default=None, exclude_if=lambda v: v is None)
    baseline_rank: int | None = Field(default=None, exclude_if=lambda v: v is None)
    limbic_score: float | None = Field(default=None, exclude_if=lambda v: v is None)
    relevance: float | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="cosine_sim + text_weight * text_score (the baseline score)",
    )
    cosine_sim: float | None = Field(default=None, exclude_if=lambda v: v is None)
    text_score: float | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="BM25 coverage of the query: its words' weight this entity holds, 0 to 1",
    )
    importance: float | None = Field(default=None, exclude_if=lambda v: v is None)
    temporal: float | None = Field(default=None, exclude_if=lambda v: v is None)
    cooc_boost: float | None = Field(default=None, exclude_if=lambda v: v is None)
    access_count: int | None = Field(default=None, exclude_if=lambda v: v is None)


class SearchSemanticOut(BaseModel):
    """Result of search_semantic."""

    results: list[SemanticHit]
    event_id: int
    treatment: Literal["limbic", "baseline"]
    engine: str
    duration_ms: float
    notice: str | None = Field(default=None, exclude_if=lambda v: v is None)
    tokens: int = Field(default=0, description=REPLY_TOKENS)


class ObservationOut(BaseModel):
    """An observation with its history fields."""

    id: int
    content: str
    kind: str
    supersedes: int | None
    superseded_at: datetime | None
    similarity_flag: int
    duplicate_of: int | None
    created_at: datetime


class SupersedeObservationIn(ProjectIn):
    """Arguments of supersede_observation."""

    entity_name: Name
    observation_id: int | None = Field(default=None, description="Id of the observation to replace")
    old_content: str | None = Field(default=None, description="Or: exact text of the observation to replace")
    new_content: ObservationText
    kind: TypeName | None = Field(default=None, description="Kind of the new observation (default: the old one's)")
    wait_for_embedding: bool | None = wait_for_embedding_field()


class SupersedeObservationOut(BaseModel):
    """The replaced and the new observation."""

    entity_name: str
    superseded: ObservationOut
    current: ObservationOut
    embedding: EmbeddingState = Field(default="done", description=EMBEDDING_STATE_DESCRIPTION)


class RelationRefIn(ProjectIn):
    """Arguments of end_relation."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, populate_by_name=True)

    from_entity: Name = Field(alias="from")
    to_entity: Name = Field(alias="to")
    relationType: TypeName


class RelationDetail(BaseModel):
    """A relation with its lifecycle fields."""

    model_config = ConfigDict(populate_by_name=True)

    from_entity: str = Field(serialization_alias="from", validation_alias="from")
    to_entity: str = Field(serialization_alias="to", validation_alias="to")
    relationType: str
    context: str | None
    active: bool
    ended_at: datetime | None
    created_at: datetime


class EndRelationOut(BaseModel):
    """The ended relation."""

    relation: RelationDetail


class SetEntityStatusIn(ProjectIn):
    """Arguments of set_entity_status."""

    entity_name: Name
    status: Status


class SetEntityStatusOut(BaseModel):
    """The new and previous status."""

    name: str
    status: str
    previous_status: str


class EntityHistoryIn(ProjectIn):
    """Arguments of get_entity_history."""

    entity_name: Name
    limit: int = Field(default=100, ge=1, le=500, description="Observations and relations at most, each")
    session_id: str | None = Field(default=None, max_length=128)


class EntityInfo(BaseModel):
    """An entity's own fields."""

    name: str
    entityType: str
    status: str
    created_at: datetime
    updated_at: datetime


class ReflectionOut(BaseModel):
    """A reflection."""

    id: int
    target_type: str
    target_id: int | None
    target_name: str | None
    author: str
    content: str
    mood: str | None
    created_at: datetime


class AddReflectionOut(ReflectionOut):
    """The stored reflection."""

    embedding: EmbeddingState = Field(default="done", description=EMBEDDING_STATE_DESCRIPTION)


class EntityHistoryOut(BaseModel):
    """Every observation (also superseded ones), every relation (also ended ones) and reflections."""

    entity: EntityInfo
    observations: list[ObservationOut]
    relations: list[RelationDetail]
    reflections: list[ReflectionOut]
    truncated: bool


class AddReflectionIn(ProjectIn):
    """Arguments of add_reflection."""

    target_type: Literal["entity", "session", "global"] = "global"
    target_name: Name | None = Field(default=None, description="Entity name (required for target_type entity)")
    author: TypeName = "sofia"
    content: ObservationText
    mood: str | None = Field(default=None, max_length=64)
    wait_for_embedding: bool | None = wait_for_embedding_field()


class SearchReflectionsIn(ProjectIn):
    """Arguments of search_reflections."""

    query: str = Field(min_length=1, max_length=2048)
    limit: int = Field(default=10, ge=1, le=50)
    target_type: Literal["entity", "session", "global"] | None = None
    author: str | None = Field(default=None, max_length=128)


class ReflectionHit(ReflectionOut):
    """A reflection with its scores."""

    score: float
    cosine_sim: float
    text_score: float


class SearchReflectionsOut(BaseModel):
    """Result of search_reflections."""

    results: list[ReflectionHit]


class FindDuplicatesIn(ProjectIn):
    """Arguments of find_duplicate_observations."""

    entity_name: Name | None = Field(default=None, description="Only this entity (default: all)")
    threshold: float = Field(default=0.9, ge=0.5, le=1.0, description="Cosine similarity of a near-duplicate")
    limit: int = Field(default=50, ge=1, le=500, description="Pairs returned at most")
    max_observations: int = Field(default=2000, ge=2, le=20000, description="Observations scanned at most")


class ObservationBrief(BaseModel):
    """An observation id and text."""

    id: int
    content: str


class DuplicatePair(BaseModel):
    """Two near-identical current observations of one entity."""

    entity_name: str
    kept: ObservationBrief
    duplicate: ObservationBrief
    similarity: float


class FindDuplicatesOut(BaseModel):
    """Near-duplicate pairs; the later observation of each pair gets the similarity flag."""

    pairs: list[DuplicatePair]
    flagged: int
    scanned_observations: int
    truncated: bool


class ConsolidateIn(ProjectIn):
    """Arguments of consolidate."""

    dry_run: bool = Field(default=True, description="Report what would change without changing anything")
    decay_after_days: int = Field(default=30, ge=1, le=3650, description="Access counts older than this decay")
    decay_factor: float = Field(default=0.5, ge=0.0, le=1.0)
    wait_for_embedding: bool | None = wait_for_embedding_field()


class MergedObservation(BaseModel):
    """A flagged duplicate merged into the observation it repeats."""

    entity_name: str
    kept_id: int
    removed_id: int
    content: str


class ConsolidateOut(BaseModel):
    """What consolidation did (or would do)."""

    dry_run: bool
    merged: list[MergedObservation]
    merged_count: int
    decayed_entities: int
    reembedded_entities: int
    embedding: EmbeddingState = Field(default="done", description=EMBEDDING_STATE_DESCRIPTION)


class QualityReportIn(ProjectIn):
    """Arguments of search_quality_report."""

    days: int = Field(default=30, ge=1, le=3650, description="Search events of the last N days")
    k: int = Field(default=10, ge=1, le=50)


class TreatmentQuality(BaseModel):
    """Quality of one treatment from implicit feedback."""

    treatment: Literal["limbic", "baseline"]
    events: int
    events_with_feedback: int
    ndcg_at_k: float | None
    mrr: float | None
    ndcg_at_k_baseline_order: float | None = Field(description="The same events scored in baseline order")
    mrr_baseline_order: float | None


class QualityReportOut(BaseModel):
    """NDCG@k and MRR per treatment."""

    k: int
    days: int
    feedback_window_seconds: int
    treatments: list[TreatmentQuality]


class GraphStatsOut(BaseModel):
    """Counts of the project's graph."""

    entities: int
    observations: int
    superseded_observations: int
    flagged_observations: int
    relations: int
    ended_relations: int
    reflections: int
    entities_with_embedding: int
    search_events: int
    feedback: int
    by_type: list[TypeCount]
    by_status: list[StatusCount]
    top_entities: list[ImportantEntity]
    embedding_model: str
