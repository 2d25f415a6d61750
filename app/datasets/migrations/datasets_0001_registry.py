"""datasets: registry of named datasets and stored query results

Revision ID: datasets_0001
Revises:
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "datasets_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = ("datasets",)
depends_on: str | Sequence[str] | None = "core_0001"
# Expand/contract (docs/reliability.md): new tables only.
older_code_may_run: bool = True


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("description", sa.Text(), nullable=False, server_default=""),
        sa.Column("source", sa.String(16), nullable=False, server_default="registered"),
        sa.Column("created_by", sa.String(128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_datasets"),
        sa.UniqueConstraint("name", name="uq_datasets_name"),
    )
    op.create_table(
        "dataset_queries",
        sa.Column("query_id", sa.String(32), nullable=False),
        sa.Column("sql", sa.Text(), nullable=False),
        sa.Column("files", postgresql.JSONB(), nullable=False),
        sa.Column("columns", postgresql.JSONB(), nullable=False),
        sa.Column("rows_stored", sa.BigInteger(), nullable=False),
        sa.Column("rows_total", sa.BigInteger(), nullable=False),
        sa.Column("result_path", sa.Text(), nullable=False),
        sa.Column("cache_key", sa.String(64), nullable=True),
        sa.Column("label", sa.String(200), nullable=True),
        sa.Column("created_by", sa.String(128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("query_id", name="pk_dataset_queries"),
    )
    op.create_index("ix_dataset_queries_created_at", "dataset_queries", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_dataset_queries_created_at", table_name="dataset_queries")
    op.drop_table("dataset_queries")
    op.drop_table("datasets")
