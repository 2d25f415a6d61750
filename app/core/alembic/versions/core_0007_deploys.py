"""core: the lock of a server that has had a key, and the log of applied revisions

Revision ID: core_0007
Revises: core_0006
Create Date: 2026-11-27

`auth_lock` holds one row once the database has had an API key (a stored key was created, or a host
started with configured keys): from then on no host starts open, even after every key is revoked. A
database that had a key before this revision (any row of `api_keys`, revoked ones included) is locked
here.

`schema_revisions` records each applied revision with its `older_code_may_run` flag, its down
revisions and the build that applied it, so a build that does not have a newer revision's file can
still tell whether it may run on that schema (`app.core.migrations.newer_schema`).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "core_0007"
down_revision: str | None = "core_0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Expand/contract (docs/reliability.md): new tables only.
older_code_may_run: bool = True


def upgrade() -> None:
    op.create_table(
        "auth_lock",
        sa.Column("id", sa.SmallInteger(), nullable=False, server_default="1"),
        sa.Column("locked_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("reason", sa.String(200), nullable=False),
        sa.CheckConstraint("id = 1", name="ck_auth_lock_single_row"),
        sa.PrimaryKeyConstraint("id", name="pk_auth_lock"),
    )
    op.execute(
        "INSERT INTO auth_lock (id, reason) SELECT 1, 'API keys existed before the lock was recorded' "
        "WHERE EXISTS (SELECT 1 FROM api_keys)"
    )
    op.create_table(
        "schema_revisions",
        sa.Column("revision", sa.String(64), nullable=False),
        sa.Column("down_revisions", postgresql.ARRAY(sa.String(64)), nullable=False),
        sa.Column("older_code_may_run", sa.Boolean(), nullable=False),
        sa.Column("build", sa.String(64), nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("revision", name="pk_schema_revisions"),
    )


def downgrade() -> None:
    op.drop_table("schema_revisions")
    op.drop_table("auth_lock")
