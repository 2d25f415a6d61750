"""core: default MCP toolsets per API key

Revision ID: core_0003
Revises: core_0002
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "core_0003"
down_revision: str | None = "core_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Expand/contract (docs/reliability.md): a nullable column older code neither reads nor writes.
older_code_may_run: bool = True


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("toolsets", postgresql.ARRAY(sa.String(32)), nullable=True))


def downgrade() -> None:
    op.drop_column("api_keys", "toolsets")
