"""memory: English stemming for full text and a BM25 document vector per memory (HNSW, inner product)

Revision ID: memory_0003
Revises: memory_0002
Create Date: 2026-11-24

`tsv` moves from the `simple` configuration (word forms as written) to `english` (Snowball stems, stop
words dropped), and `lexical` holds `bm25_document(tsv's vector)`: the memory's BM25 term weights as a
`sparsevec`, so that ranking a query is one inner-product index scan (`app.core.embeddings.lexical`).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "memory_0003"
down_revision: str | None = "memory_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = "core_0005"
# Expand/contract (docs/reliability.md):
# `tsv` changes to English stems: older code's `simple` full-text queries would miss words.
older_code_may_run: bool = False


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memories_tsv")
    # One ALTER: the table is rewritten once for both generated columns.
    op.execute(
        "ALTER TABLE memories DROP COLUMN tsv, "
        "ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED, "
        "ADD COLUMN lexical sparsevec(1000000000) "
        "GENERATED ALWAYS AS (bm25_document(to_tsvector('english'::regconfig, content))) STORED"
    )
    op.execute("CREATE INDEX ix_memories_tsv ON memories USING gin (tsv)")
    # m 8 / ef_construction 32 rather than pgvector's 16 / 64: inserts cost much less, for a small loss of
    # BM25 recall that the rare-word path makes up for the most part.
    op.execute(
        "CREATE INDEX ix_memories_lexical ON memories USING hnsw (lexical sparsevec_ip_ops) "
        "WITH (m = 8, ef_construction = 32)"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_memories_lexical")
    op.execute("DROP INDEX IF EXISTS ix_memories_tsv")
    op.execute(
        "ALTER TABLE memories DROP COLUMN lexical, DROP COLUMN tsv, "
        "ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, content)) STORED"
    )
    op.execute("CREATE INDEX ix_memories_tsv ON memories USING gin (tsv)")
