"""datasets: the result cache's epoch per project (invalidation seen by every host of a fleet)

Stored paths need no change: rows written before the object store hold absolute paths, which are still
read in place; new rows hold keys relative to the store.

Revision ID: datasets_0003
Revises: datasets_0002
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "datasets_0003"
down_revision: str | None = "datasets_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A new table only: code built before it runs on (it never reads the table, and its cache stays local).
older_code_may_run: bool = True


def upgrade() -> None:
    op.create_table(
        "dataset_cache_epochs",
        sa.Column("project", sa.String(128), primary_key=True),
        sa.Column("epoch", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )


def downgrade() -> None:
    op.drop_table("dataset_cache_epochs")
