"""analysis: ingested records, findings with embeddings, ingest state

Revision ID: analysis_0001
Revises:
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "analysis_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = ("analysis",)
depends_on: str | Sequence[str] | None = "core_0001"
# Expand/contract (docs/reliability.md): new tables only.
older_code_may_run: bool = True


def _project_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["project_id"], ["projects.id"], ondelete="CASCADE", name=f"fk_{table}_project_id_projects"
    )


def upgrade() -> None:
    op.create_table(
        "analysis_records",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("project_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("analysis_id", sa.String(128), nullable=False),
        sa.Column("model", sa.String(64), nullable=False),
        sa.Column("record_id", sa.Text(), nullable=True),
        sa.Column("page", sa.Integer(), nullable=True),
        sa.Column("data", postgresql.JSONB(), nullable=False),
        sa.Column("ingested_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_analysis_records"),
        _project_fk("analysis_records"),
    )
    op.execute(
        "CREATE UNIQUE INDEX uq_analysis_records_identity ON analysis_records "
        "(project_id, analysis_id, model, record_id) WHERE record_id IS NOT NULL"
    )
    op.execute("CREATE INDEX ix_analysis_records_session ON analysis_records (project_id, analysis_id, model, id)")
    op.execute("CREATE INDEX ix_analysis_records_expires ON analysis_records (expires_at)")

    op.create_table(
        "analysis_findings",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("project_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("analysis_id", sa.String(128), nullable=False),
        sa.Column("category", sa.String(64), nullable=False),
        sa.Column("finding", sa.Text(), nullable=False),
        sa.Column("metadata", postgresql.JSONB(), nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("source_model", sa.String(64), nullable=True),
        sa.Column("persistent", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_analysis_findings"),
        _project_fk("analysis_findings"),
    )
    op.execute("CREATE INDEX ix_analysis_findings_session ON analysis_findings (project_id, analysis_id, category)")
    op.execute(
        "CREATE INDEX ix_analysis_findings_expires ON analysis_findings (expires_at) WHERE expires_at IS NOT NULL"
    )

    op.execute(
        "CREATE TABLE analysis_finding_embeddings ("
        " owner_id bigint NOT NULL REFERENCES analysis_findings(id) ON DELETE CASCADE,"
        " model varchar(200) NOT NULL, dim integer NOT NULL, embedding vector NOT NULL,"
        " created_at timestamptz NOT NULL DEFAULT now(),"
        " CONSTRAINT pk_analysis_finding_embeddings PRIMARY KEY (owner_id, model))"
    )
    op.execute(
        "CREATE INDEX ix_analysis_finding_embeddings_hnsw ON analysis_finding_embeddings "
        "USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE model = 'all-MiniLM-L6-v2'"
    )

    op.create_table(
        "analysis_ingest_state",
        sa.Column("project_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("analysis_id", sa.String(128), nullable=False),
        sa.Column("state_key", sa.String(64), nullable=False),
        sa.Column("model", sa.String(64), nullable=False),
        sa.Column("params", postgresql.JSONB(), nullable=False),
        sa.Column("next_token", postgresql.JSONB(), nullable=True),
        sa.Column("pages_done", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("complete", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("total_available", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("project_id", "analysis_id", "state_key", name="pk_analysis_ingest_state"),
        _project_fk("analysis_ingest_state"),
    )


def downgrade() -> None:
    op.drop_table("analysis_ingest_state")
    op.execute("DROP TABLE IF EXISTS analysis_finding_embeddings")
    op.drop_table("analysis_findings")
    op.drop_table("analysis_records")
