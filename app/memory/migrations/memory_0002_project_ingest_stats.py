"""memory: ingestion counters per project (what `metrics` shows a project-bound key)

Revision ID: memory_0002
Revises: memory_0001
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "memory_0002"
down_revision: str | None = "memory_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Expand/contract (docs/reliability.md): a new table.
older_code_may_run: bool = True


def upgrade() -> None:
    # The counters of memory_ingest_stats (id 1) stay as the totals from before this revision.
    op.create_table(
        "memory_project_ingest_stats",
        sa.Column("project_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("documents_indexed", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("chunks_indexed", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("last_chunk_size", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("project_id", name="pk_memory_project_ingest_stats"),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            ondelete="CASCADE",
            name="fk_memory_project_ingest_stats_project_id_projects",
        ),
    )


def downgrade() -> None:
    op.drop_table("memory_project_ingest_stats")
