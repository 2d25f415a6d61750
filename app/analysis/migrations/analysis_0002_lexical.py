"""analysis: findings ranked by BM25 under `cairn_text` (accents and function words ignored)

Revision ID: analysis_0002_lexical
Revises: analysis_0001
Create Date: 2026-11-27

`analysis_findings` gains `tsv`, the finding's lexemes under the `cairn_text` configuration (core_0008:
Snowball stems, accents stripped, English and Spanish function words dropped), and `lexical`, its BM25
document vector (`bm25_document`, core_0005), so that a finding is ranked by words as memories are
(`app.core.embeddings.lexical`) instead of `ts_rank_cd` over the `simple` configuration, where "the" or
"with" matched. `tsv` has a GIN index written through (no pending list).

`lexical` has no HNSW index, unlike memories': every analysis search is confined to one session, a
narrow slice of the table, whose findings sharing a lexeme with the query (the GIN index finds them)
are scored exactly (`AnalysisRepository.text_hits`). A graph walk filtered to one session would pass
over other sessions' rows and could stop before reaching the session's own.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "analysis_0002_lexical"
down_revision: str | None = "analysis_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = "core_0008"
# Expand/contract (docs/reliability.md): two generated columns and an index; older code computes
# its own `to_tsvector('simple', finding)` and never reads them.
older_code_may_run: bool = True


def upgrade() -> None:
    # One ALTER: the table is rewritten once for both generated columns.
    op.execute(
        "ALTER TABLE analysis_findings "
        "ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector('cairn_text'::regconfig, finding)) STORED, "
        "ADD COLUMN lexical sparsevec(1000000000) "
        "GENERATED ALWAYS AS (bm25_document(to_tsvector('cairn_text'::regconfig, finding))) STORED"
    )
    op.execute("CREATE INDEX ix_analysis_findings_tsv ON analysis_findings USING gin (tsv) WITH (fastupdate = off)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_analysis_findings_tsv")
    op.execute("ALTER TABLE analysis_findings DROP COLUMN lexical, DROP COLUMN tsv")
