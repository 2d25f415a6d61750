"""graph: BM25 over the `cairn_text` configuration for entities and reflections

Revision ID: graph_0003_lexical
Revises: graph_0002
Create Date: 2026-11-27

`tsv` of entities and reflections moves from the `simple` configuration (word forms as written, every
function word kept, accents significant) to `cairn_text` (core_0008: accents stripped, English and
Spanish function words dropped, English stems), and a `lexical` column holds `bm25_document` of the same
vector (core_0005): the row's BM25 term weights as a `sparsevec` with an HNSW inner-product index, so
that graph text search ranks with `app.core.embeddings.lexical` as memory does.

The entity vector used to weight the name above the type above the observations (`setweight` A/B/C,
read by `ts_rank_cd`). BM25 reads term frequencies only, so the weights are gone: name, type and
observations form one document, as in the entity's embedding snapshot.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "graph_0003_lexical"
down_revision: str | None = "graph_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = "core_0008"  # after core_0005 (bm25_document)
# Expand/contract (docs/reliability.md): older code still runs on it (the columns it reads keep their
# names and types); during a rolling deploy its `simple` full-text queries miss inflected words.
older_code_may_run: bool = True

ENTITY_TEXT = "name || ' ' || entity_type || ' ' || obs_text"
OLD_ENTITY_TSV = (
    "setweight(to_tsvector('simple'::regconfig, name), 'A') "
    "|| setweight(to_tsvector('simple'::regconfig, entity_type), 'B') "
    "|| setweight(to_tsvector('simple'::regconfig, obs_text), 'C')"
)
TABLES = {"graph_entities": ENTITY_TEXT, "graph_reflections": "content"}


def upgrade() -> None:
    for table, source in TABLES.items():
        vector = f"to_tsvector('cairn_text'::regconfig, {source})"
        op.execute(f"DROP INDEX IF EXISTS ix_{table}_tsv")
        # One ALTER: the table is rewritten once for both generated columns.
        op.execute(
            f"ALTER TABLE {table} DROP COLUMN tsv, "
            f"ADD COLUMN tsv tsvector GENERATED ALWAYS AS ({vector}) STORED, "
            f"ADD COLUMN lexical sparsevec(1000000000) GENERATED ALWAYS AS (bm25_document({vector})) STORED"
        )
        op.execute(f"CREATE INDEX ix_{table}_tsv ON {table} USING gin (tsv) WITH (fastupdate = off)")
        # As memory_0003: m 8 / ef_construction 32, the rare-word path through the GIN index makes up
        # for most of the recall this costs.
        op.execute(
            f"CREATE INDEX ix_{table}_lexical ON {table} USING hnsw (lexical sparsevec_ip_ops) "
            "WITH (m = 8, ef_construction = 32)"
        )


def downgrade() -> None:
    old = {"graph_entities": OLD_ENTITY_TSV, "graph_reflections": "to_tsvector('simple'::regconfig, content)"}
    for table, vector in old.items():
        op.execute(f"DROP INDEX IF EXISTS ix_{table}_lexical")
        op.execute(f"DROP INDEX IF EXISTS ix_{table}_tsv")
        op.execute(
            f"ALTER TABLE {table} DROP COLUMN lexical, DROP COLUMN tsv, "
            f"ADD COLUMN tsv tsvector GENERATED ALWAYS AS ({vector}) STORED"
        )
        op.execute(f"CREATE INDEX ix_{table}_tsv ON {table} USING gin (tsv) WITH (fastupdate = off)")
