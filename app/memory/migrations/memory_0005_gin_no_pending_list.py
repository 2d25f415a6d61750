"""memory: GIN indexes without a pending list

Revision ID: memory_0005
Revises: memory_0004
Create Date: 2026-11-26

A GIN index with `fastupdate` (PostgreSQL's default) puts new entries in a pending list that every
search of the index reads through until a vacuum or a 4 MB list merges it. One key pushing large
texts kept that list long, and another project's lexical search (a GIN count per rare query word and
a GIN lookup of the rows holding one) slowed as it grew, notably during the combined hostile load of
docs/benchmarks.md (large pushes among the attacker's calls).
Without the list each insert updates the index itself (a little more work per chunk), and a search
costs the same whatever others write. The lists present are merged here.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "memory_0005"
down_revision: str | None = "memory_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Expand/contract (docs/reliability.md): index storage options only.
older_code_may_run: bool = True

INDEXES = ("ix_memories_tsv", "ix_memories_tags", "ix_memories_metadata")


def upgrade() -> None:
    for name in INDEXES:
        op.execute(f"ALTER INDEX {name} SET (fastupdate = off)")
        op.execute(f"SELECT gin_clean_pending_list('{name}'::regclass)")


def downgrade() -> None:
    for name in INDEXES:
        op.execute(f"ALTER INDEX {name} RESET (fastupdate)")
