"""core: the embedding queue shared by every family

Revision ID: core_0004
Revises: core_0003
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "core_0004"
down_revision: str | None = "core_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Expand/contract (docs/reliability.md): a new table.
older_code_may_run: bool = True


def upgrade() -> None:
    op.create_table(
        "embedding_queue",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("target", sa.String(64), nullable=False),
        sa.Column("ref", sa.String(64), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("not_before", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("leased_until", sa.DateTime(timezone=True)),
        sa.Column("last_error", sa.Text()),
        sa.PrimaryKeyConstraint("id", name="pk_embedding_queue"),
        sa.UniqueConstraint("target", "ref", "model", name="uq_embedding_queue_target_ref_model"),
    )
    op.create_index("ix_embedding_queue_model_not_before", "embedding_queue", ["model", "not_before"])


def downgrade() -> None:
    op.drop_table("embedding_queue")
