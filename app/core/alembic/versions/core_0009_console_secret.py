"""core: `server_secrets`, the secrets every host of a database shares (the console's form key)

Revision ID: core_0009_console_secret
Revises: core_0008
Create Date: 2026-11-27

One row per named secret, made by the first process that needs it (`INSERT ... ON CONFLICT DO
NOTHING`) and read by every other, so all hosts of a fleet sign and check the console's form tokens
with the same key (`app.core.ui`).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "core_0009_console_secret"
down_revision: str | None = "core_0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# A new table only: code built before this revision never reads it.
older_code_may_run: bool = True


def upgrade() -> None:
    op.execute(
        "CREATE TABLE server_secrets ("
        " name text PRIMARY KEY,"
        " value text NOT NULL,"
        " created_at timestamptz NOT NULL DEFAULT now())"
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS server_secrets")
