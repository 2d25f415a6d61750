"""graph: the entity GIN indexes keep a pending list of at most 256 kB

Revision ID: graph_0005_gin_bounded_list
Revises: graph_0004_english_status
Create Date: 2026-11-28

graph_0002 wrote every GIN entry through, so a search never read another writer's unmerged entries.
Each new entity then updated its trigram and full-text indexes entry by entry, about 60 trigrams and
a dozen lexemes apiece, the largest share of a bulk `create_entities` after the lexical HNSW index.
With a pending list entries are appended, and merged in one sorted pass when the list fills; bounded
at 256 kB (the smallest lists PostgreSQL allows are 64 kB), what a search reads through stays small
and no longer grows with what others write. The figures are in docs/benchmarks.md ("Graph writes").
Reflections are written one at a time and keep their index written through.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "graph_0005_gin_bounded_list"
down_revision: str | None = "graph_0004_english_status"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Expand/contract (docs/reliability.md): index storage options only.
older_code_may_run: bool = True

INDEXES = ("ix_graph_entities_tsv", "ix_graph_entities_trgm")
PENDING_LIST_KB = 256


def upgrade() -> None:
    for name in INDEXES:
        op.execute(f"ALTER INDEX {name} SET (fastupdate = on, gin_pending_list_limit = {PENDING_LIST_KB})")


def downgrade() -> None:
    for name in INDEXES:
        op.execute(f"ALTER INDEX {name} SET (fastupdate = off)")
        op.execute(f"ALTER INDEX {name} RESET (gin_pending_list_limit)")
        op.execute(f"SELECT gin_clean_pending_list('{name}'::regclass)")
