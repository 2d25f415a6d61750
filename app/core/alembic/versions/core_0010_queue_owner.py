"""core: who queued each embedding row (`owner`: the caller's key, `project`), for fair leasing

Revision ID: core_0010_queue_owner
Revises: core_0009_console_secret
Create Date: 2026-11-27

Workers lease round-robin across callers (`app.core.embeddings.repository.EmbeddingQueueRepository.lease`)
and a key's rows waiting in the queue are capped (`embedding_max_pending_per_key`). Rows queued by code
built before this revision, and rows no call queued (the start-up sweep, backfills), get '' in both
columns: one group of their own. The index serves the walk over the groups, each group's oldest and
newest due rows, and the count of a key's rows.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "core_0010_queue_owner"
down_revision: str | None = "core_0009_console_secret"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Two columns with a constant default (no table rewrite) and an index: code built before this
# revision never names them, and its rows fall into the '' group.
older_code_may_run: bool = True


def upgrade() -> None:
    op.execute(
        "ALTER TABLE embedding_queue ADD COLUMN IF NOT EXISTS owner text NOT NULL DEFAULT '', "
        "ADD COLUMN IF NOT EXISTS project text NOT NULL DEFAULT ''"
    )
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_embedding_queue_model_owner "
        "ON embedding_queue (model, owner, project, not_before, id)"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_embedding_queue_model_owner")
    op.execute("ALTER TABLE embedding_queue DROP COLUMN IF EXISTS owner, DROP COLUMN IF EXISTS project")
