"""memory: an index on the document a chunk belongs to

Revision ID: memory_0004
Revises: memory_0003
Create Date: 2026-11-25

`get_memory`, `update_memory` and `delete_memory` reach every chunk of a memory's document (one push)
by `document_id`; a partial index keeps that a few index reads at any table size.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "memory_0004"
down_revision: str | None = "memory_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_memories_document ON memories (document_id) WHERE document_id IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memories_document")
