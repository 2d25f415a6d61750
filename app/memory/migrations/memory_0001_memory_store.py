"""memory: collections, memories (full-text), per-model embeddings (HNSW), ingest counters

Revision ID: memory_0001
Revises:
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "memory_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = ("memory",)
depends_on: str | Sequence[str] | None = "core_0001"
# Expand/contract (docs/reliability.md): new tables only.
older_code_may_run: bool = True

UUID = postgresql.UUID(as_uuid=True)
NOW = sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "memory_collections",
        sa.Column("id", UUID, nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("vector_size", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_memory_collections"),
        sa.UniqueConstraint("name", name="uq_memory_collections_name"),
        sa.CheckConstraint("vector_size > 0 AND vector_size <= 16000", name="ck_memory_collections_vector_size"),
    )
    op.create_table(
        "memories",
        sa.Column("id", UUID, nullable=False),
        sa.Column("project_id", UUID, nullable=False),
        sa.Column("collection_id", UUID, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False, server_default="chunk"),
        sa.Column("memory_type", sa.String(16), nullable=False, server_default="semantic"),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("tags", postgresql.ARRAY(sa.Text()), nullable=False, server_default="{}"),
        sa.Column("metadata", postgresql.JSONB(), nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("source_uri", sa.Text(), nullable=True),
        sa.Column("document_id", UUID, nullable=True),
        sa.Column("chunk_index", sa.Integer(), nullable=True),
        sa.Column("summary_key", sa.String(64), nullable=True),
        sa.Column("archived", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.Column(
            "tsv",
            postgresql.TSVECTOR(),
            sa.Computed("to_tsvector('simple'::regconfig, content)", persisted=True),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name="pk_memories"),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], ondelete="CASCADE", name="fk_memories_project_id_projects"
        ),
        sa.ForeignKeyConstraint(
            ["collection_id"],
            ["memory_collections.id"],
            ondelete="CASCADE",
            name="fk_memories_collection_id_memory_collections",
        ),
        sa.CheckConstraint("memory_type IN ('episodic', 'semantic', 'procedural')", name="ck_memories_memory_type"),
        sa.CheckConstraint("kind IN ('chunk', 'thought', 'summary')", name="ck_memories_kind"),
    )
    op.create_index("ix_memories_scope", "memories", ["project_id", "collection_id", "created_at"])
    op.create_index("ix_memories_hash", "memories", ["project_id", "collection_id", "content_hash"])
    op.create_index(
        "ix_memories_source",
        "memories",
        ["project_id", "collection_id", "source_uri"],
        postgresql_where=sa.text("source_uri IS NOT NULL"),
    )
    op.create_index(
        "ix_memories_summary_key",
        "memories",
        ["project_id", "collection_id", "summary_key"],
        unique=True,
        postgresql_where=sa.text("summary_key IS NOT NULL"),
    )
    op.create_index("ix_memories_tags", "memories", ["tags"], postgresql_using="gin")
    op.create_index("ix_memories_tsv", "memories", ["tsv"], postgresql_using="gin")
    op.create_index(
        "ix_memories_metadata",
        "memories",
        ["metadata"],
        postgresql_using="gin",
        postgresql_ops={"metadata": "jsonb_path_ops"},
    )
    op.create_table(
        "memory_embeddings",
        sa.Column("memory_id", UUID, nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("dim", sa.Integer(), nullable=False),
        sa.Column("embedding", sa.Text(), nullable=False),  # retyped to an untyped vector below
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("memory_id", "model", name="pk_memory_embeddings"),
        sa.ForeignKeyConstraint(
            ["memory_id"], ["memories.id"], ondelete="CASCADE", name="fk_memory_embeddings_memory_id_memories"
        ),
    )
    op.execute("ALTER TABLE memory_embeddings ALTER COLUMN embedding TYPE vector USING embedding::vector")
    op.execute("CREATE INDEX ix_memory_embeddings_model ON memory_embeddings (model)")
    # The active local model's vectors get an HNSW cosine index; queries use the same expression.
    op.execute(
        "CREATE INDEX ix_memory_embeddings_hnsw_minilm ON memory_embeddings "
        "USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE model = 'all-MiniLM-L6-v2'"
    )
    op.create_table(
        "memory_ingest_stats",
        sa.Column("id", sa.SmallInteger(), nullable=False),
        sa.Column("documents_indexed", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("chunks_indexed", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("last_chunk_size", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_memory_ingest_stats"),
    )


def downgrade() -> None:
    op.drop_table("memory_ingest_stats")
    op.drop_table("memory_embeddings")
    op.drop_table("memories")
    op.drop_table("memory_collections")
