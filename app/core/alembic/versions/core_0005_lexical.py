"""core: BM25 document vectors (`lexeme_dim`, `bm25_document`) for the lexical ranker

Revision ID: core_0005
Revises: core_0004
Create Date: 2026-11-24

A family that ranks text with `app.core.embeddings.lexical` stores `bm25_document(to_tsvector(<config>, text))`
in a generated `sparsevec` column with an HNSW inner-product index. Both functions are IMMUTABLE (a
generated column may only call such functions) and their constants are those of `app.core.embeddings.lexical`:
k1 1.2, b 0.75, reference length 100 lexemes, at most 1,000 lexemes a document (the most an HNSW
index of `sparsevec` takes).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "core_0005"
down_revision: str | None = "core_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Expand/contract (docs/reliability.md): new functions only.
older_code_may_run: bool = True

# md5, not hashtext: a stored dimension must not change when PostgreSQL's internal hash does.
# bm25_document keeps the search path it was created under: pg_restore recomputes generated columns
# with an empty one, where `lexeme_dim` and `sparsevec` would not be found.
LEXEME_DIM = """
CREATE FUNCTION lexeme_dim(lexeme text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (('x' || substr(md5(lexeme), 1, 8))::bit(32)::bigint & 1073741823) % 1000000000 + 1
"""

BM25_DOCUMENT = """
CREATE FUNCTION bm25_document(doc tsvector) RETURNS sparsevec
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path FROM CURRENT AS $$
    WITH terms AS (
        SELECT lexeme_dim(lexeme) AS dim, greatest(cardinality(positions), 1)::float8 AS tf FROM unnest(doc)
    ), len AS (
        SELECT greatest(sum(tf), 1.0) AS dl FROM terms
    ), dims AS (
        SELECT dim, sum(tf) AS tf FROM terms GROUP BY dim
    ), weights AS (
        SELECT dim, tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len.dl / 100.0)) AS w
        FROM dims, len ORDER BY w DESC, dim LIMIT 1000
    )
    SELECT (coalesce('{' || string_agg(dim || ':' || w, ',' ORDER BY dim) || '}', '{}') || '/1000000000')::sparsevec
    FROM weights
$$
"""


def upgrade() -> None:
    op.execute(LEXEME_DIM)
    op.execute(BM25_DOCUMENT)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS bm25_document(tsvector)")
    op.execute("DROP FUNCTION IF EXISTS lexeme_dim(text)")
