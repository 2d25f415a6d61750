"""graph: GIN indexes without a pending list

Revision ID: graph_0002
Revises: graph_0001
Create Date: 2026-11-26

As memory_0005: with `fastupdate` (PostgreSQL's default) every text search of an index reads through
the entries written since the last merge, so one key writing many entities would slow every other
project's `search_nodes`. Without the list each insert updates the index itself, and a search costs
the same whatever others write. The lists present are merged here.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "graph_0002"
down_revision: str | None = "graph_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Expand/contract (docs/reliability.md): index storage options only.
older_code_may_run: bool = True

INDEXES = ("ix_graph_entities_tsv", "ix_graph_entities_trgm", "ix_graph_reflections_tsv")


def upgrade() -> None:
    for name in INDEXES:
        op.execute(f"ALTER INDEX {name} SET (fastupdate = off)")
        op.execute(f"SELECT gin_clean_pending_list('{name}'::regclass)")


def downgrade() -> None:
    for name in INDEXES:
        op.execute(f"ALTER INDEX {name} RESET (fastupdate)")
