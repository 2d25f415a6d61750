"""core: the `cairn_text` text search configuration (accents and function words ignored)

Revision ID: core_0008
Revises: core_0007
Create Date: 2026-11-27

A family whose texts mix languages, or come from users who type without accents, ranks them under
`cairn_text`: PostgreSQL's `english` configuration (Snowball stems, English stop words) with every word
first stripped of its accents (the `unaccent` extension) and Spanish function words dropped (`de`, `la`,
`los`, ...). "migracion catalogo" and "migración catálogo" then give the same lexemes, and neither
"with" nor "de" ever matches a row.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "core_0008"
down_revision: str | None = "core_0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Expand/contract (docs/reliability.md): a new extension, dictionary and configuration only.
older_code_may_run: bool = True

WORD_TOKENS = "asciiword, asciihword, hword_asciipart, word, hword, hword_part"


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS unaccent")
    # A stop-word filter only: ACCEPT = false hands every other word on to the next dictionary.
    op.execute(
        "CREATE TEXT SEARCH DICTIONARY cairn_stop_es "
        "(TEMPLATE = pg_catalog.simple, STOPWORDS = spanish, ACCEPT = false)"
    )
    op.execute("CREATE TEXT SEARCH CONFIGURATION cairn_text (COPY = pg_catalog.english)")
    op.execute(
        f"ALTER TEXT SEARCH CONFIGURATION cairn_text ALTER MAPPING FOR {WORD_TOKENS} "
        "WITH unaccent, cairn_stop_es, english_stem"
    )


def downgrade() -> None:
    op.execute("DROP TEXT SEARCH CONFIGURATION IF EXISTS cairn_text")
    op.execute("DROP TEXT SEARCH DICTIONARY IF EXISTS cairn_stop_es")
