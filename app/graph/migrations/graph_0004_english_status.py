"""graph: English entity statuses (active, archived) in place of the seed's Spanish ones

Revision ID: graph_0004_english_status
Revises: graph_0003_lexical
Create Date: 2026-11-27

Replies name statuses in English; inputs still accept the seed's `activo` / `archivado`
(`app.graph.schemas.english_status`). The stored values move with them and the column's default
becomes `active`.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "graph_0004_english_status"
down_revision: str | None = "graph_0003_lexical"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Older code still runs on it: the column keeps its name and type, and its archived filter
# (CAIRN_GRAPH_ARCHIVED_STATUSES) already lists `archived`; entities it creates meanwhile say `activo`.
older_code_may_run: bool = True

RENAMED = {"activo": "active", "archivado": "archived"}


def upgrade() -> None:
    for spanish, english in RENAMED.items():
        op.execute(f"UPDATE graph_entities SET status = '{english}' WHERE status = '{spanish}'")
    op.execute("ALTER TABLE graph_entities ALTER COLUMN status SET DEFAULT 'active'")


def downgrade() -> None:
    op.execute("ALTER TABLE graph_entities ALTER COLUMN status SET DEFAULT 'activo'")
    for spanish, english in RENAMED.items():
        op.execute(f"UPDATE graph_entities SET status = '{spanish}' WHERE status = '{english}'")
