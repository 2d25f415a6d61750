"""memory: indexes on the document a chunk belongs to and on live memories by age

Revision ID: memory_0004
Revises: memory_0003
Create Date: 2026-11-25

`get_memory`, `update_memory` and `delete_memory` reach every chunk of a memory's document (one push)
by `document_id`; a partial index keeps that a few index reads at any table size.
`ix_memories_live` orders the memories not archived newest first: listings (`list_thoughts`, the
console's thoughts page) read their page from it instead of sorting the table, and counting them
or finding those without a vector is an index-only scan, much cheaper than scanning the table.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "memory_0004"
down_revision: str | None = "memory_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Expand/contract (docs/reliability.md): new indexes only.
older_code_may_run: bool = True


def upgrade() -> None:
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_memories_document ON memories (document_id) WHERE document_id IS NOT NULL"
    )
    op.execute("CREATE INDEX IF NOT EXISTS ix_memories_live ON memories (created_at) INCLUDE (id) WHERE NOT archived")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memories_live")
    op.execute("DROP INDEX IF EXISTS ix_memories_document")
