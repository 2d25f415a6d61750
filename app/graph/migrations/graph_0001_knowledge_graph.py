"""graph: entities, observations, relations, reflections, limbic scoring and search-quality tables

Revision ID: graph_0001
Revises:
Create Date: 2026-11-22
"""

from collections.abc import Sequence

from alembic import op

revision: str = "graph_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = ("graph",)
depends_on: str | Sequence[str] | None = "core_0001"
# Expand/contract (docs/reliability.md): new tables only.
older_code_may_run: bool = True

MODEL = "all-MiniLM-L6-v2"

UPGRADE = f"""
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE graph_entities (
    id BIGSERIAL PRIMARY KEY,
    project_id UUID NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    entity_type TEXT NOT NULL DEFAULT 'Generic',
    status TEXT NOT NULL DEFAULT 'activo',
    obs_text TEXT NOT NULL DEFAULT '',
    search_text TEXT GENERATED ALWAYS AS (lower(name || ' ' || entity_type || ' ' || obs_text)) STORED,
    tsv TSVECTOR GENERATED ALWAYS AS (
        setweight(to_tsvector('simple', name), 'A') || setweight(to_tsvector('simple', entity_type), 'B')
        || setweight(to_tsvector('simple', obs_text), 'C')) STORED,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT uq_graph_entities_project_name UNIQUE (project_id, name)
);
CREATE INDEX ix_graph_entities_type ON graph_entities (project_id, entity_type);
CREATE INDEX ix_graph_entities_tsv ON graph_entities USING gin (tsv);
CREATE INDEX ix_graph_entities_trgm ON graph_entities USING gin (search_text gin_trgm_ops);

CREATE TABLE graph_observations (
    id BIGSERIAL PRIMARY KEY,
    entity_id BIGINT NOT NULL REFERENCES graph_entities(id) ON DELETE CASCADE,
    content TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'generic',
    supersedes BIGINT REFERENCES graph_observations(id) ON DELETE SET NULL,
    superseded_at TIMESTAMPTZ,
    similarity_flag INTEGER NOT NULL DEFAULT 0,
    duplicate_of BIGINT REFERENCES graph_observations(id) ON DELETE SET NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX ix_graph_observations_entity ON graph_observations (entity_id, superseded_at);
CREATE UNIQUE INDEX uq_graph_observations_current ON graph_observations (entity_id, md5(content))
    WHERE superseded_at IS NULL;

CREATE TABLE graph_relations (
    id BIGSERIAL PRIMARY KEY,
    project_id UUID NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    from_entity BIGINT NOT NULL REFERENCES graph_entities(id) ON DELETE CASCADE,
    to_entity BIGINT NOT NULL REFERENCES graph_entities(id) ON DELETE CASCADE,
    relation_type TEXT NOT NULL,
    context TEXT,
    active BOOLEAN NOT NULL DEFAULT true,
    ended_at TIMESTAMPTZ,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT uq_graph_relations_triple UNIQUE (from_entity, to_entity, relation_type)
);
CREATE INDEX ix_graph_relations_to ON graph_relations (to_entity);
CREATE INDEX ix_graph_relations_type ON graph_relations (project_id, relation_type);

CREATE TABLE graph_reflections (
    id BIGSERIAL PRIMARY KEY,
    project_id UUID NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    target_type TEXT NOT NULL,
    target_id BIGINT,
    author TEXT NOT NULL DEFAULT 'sofia',
    content TEXT NOT NULL,
    mood TEXT,
    tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX ix_graph_reflections_project ON graph_reflections (project_id, target_type, target_id);
CREATE INDEX ix_graph_reflections_tsv ON graph_reflections USING gin (tsv);

CREATE TABLE graph_entity_access (
    entity_id BIGINT PRIMARY KEY REFERENCES graph_entities(id) ON DELETE CASCADE,
    access_count INTEGER NOT NULL DEFAULT 1,
    last_access TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX ix_graph_entity_access_last ON graph_entity_access (last_access);

CREATE TABLE graph_access_log (
    entity_id BIGINT NOT NULL REFERENCES graph_entities(id) ON DELETE CASCADE,
    access_date DATE NOT NULL,
    access_count INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (entity_id, access_date)
);

CREATE TABLE graph_cooccurrences (
    entity_a_id BIGINT NOT NULL REFERENCES graph_entities(id) ON DELETE CASCADE,
    entity_b_id BIGINT NOT NULL REFERENCES graph_entities(id) ON DELETE CASCADE,
    co_count INTEGER NOT NULL DEFAULT 1,
    last_co TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (entity_a_id, entity_b_id),
    CONSTRAINT ck_graph_cooccurrences_order CHECK (entity_a_id < entity_b_id)
);
CREATE INDEX ix_graph_cooccurrences_b ON graph_cooccurrences (entity_b_id);

CREATE TABLE graph_search_events (
    event_id BIGSERIAL PRIMARY KEY,
    project_id UUID NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    query_text TEXT NOT NULL,
    query_hash TEXT NOT NULL,
    timestamp TIMESTAMPTZ NOT NULL DEFAULT now(),
    treatment INTEGER NOT NULL,
    k_limit INTEGER NOT NULL,
    num_results INTEGER NOT NULL,
    duration_ms DOUBLE PRECISION,
    engine_used TEXT NOT NULL
);
CREATE INDEX ix_graph_search_events_hash ON graph_search_events (query_hash);
CREATE INDEX ix_graph_search_events_time ON graph_search_events (project_id, timestamp);

CREATE TABLE graph_search_results (
    result_id BIGSERIAL PRIMARY KEY,
    event_id BIGINT NOT NULL REFERENCES graph_search_events(event_id) ON DELETE CASCADE,
    entity_id BIGINT REFERENCES graph_entities(id) ON DELETE SET NULL,
    entity_name TEXT NOT NULL,
    rank INTEGER NOT NULL,
    limbic_score DOUBLE PRECISION,
    cosine_sim DOUBLE PRECISION,
    text_score DOUBLE PRECISION,
    importance DOUBLE PRECISION,
    temporal DOUBLE PRECISION,
    cooc_boost DOUBLE PRECISION,
    baseline_rank INTEGER,
    CONSTRAINT uq_graph_search_results_event_entity UNIQUE (event_id, entity_name)
);
CREATE INDEX ix_graph_search_results_entity ON graph_search_results (entity_id);

CREATE TABLE graph_implicit_feedback (
    feedback_id BIGSERIAL PRIMARY KEY,
    event_id BIGINT NOT NULL REFERENCES graph_search_events(event_id) ON DELETE CASCADE,
    entity_id BIGINT,
    entity_name TEXT NOT NULL,
    re_accessed INTEGER NOT NULL DEFAULT 1,
    access_delta INTEGER,
    session_id TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT uq_graph_implicit_feedback_event_entity UNIQUE (event_id, entity_name)
);

CREATE TABLE graph_embeddings (
    owner_id BIGINT NOT NULL REFERENCES graph_entities(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    dim INTEGER NOT NULL,
    embedding vector NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_id, model)
);
CREATE INDEX ix_graph_embeddings_hnsw ON graph_embeddings
    USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE model = '{MODEL}';

CREATE TABLE graph_reflection_embeddings (
    owner_id BIGINT NOT NULL REFERENCES graph_reflections(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    dim INTEGER NOT NULL,
    embedding vector NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_id, model)
);
CREATE INDEX ix_graph_reflection_embeddings_hnsw ON graph_reflection_embeddings
    USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE model = '{MODEL}';
"""

TABLES = [
    "graph_reflection_embeddings",
    "graph_embeddings",
    "graph_implicit_feedback",
    "graph_search_results",
    "graph_search_events",
    "graph_cooccurrences",
    "graph_access_log",
    "graph_entity_access",
    "graph_reflections",
    "graph_relations",
    "graph_observations",
    "graph_entities",
]


def upgrade() -> None:
    for statement in UPGRADE.split(";\n"):
        if statement.strip():
            op.execute(statement)


def downgrade() -> None:
    for table in TABLES:
        op.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
