"""datasets: registered names and stored results belong to a project

Revision ID: datasets_0002
Revises: datasets_0001
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "datasets_0002"
down_revision: str | None = "datasets_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Expand/contract (docs/reliability.md):
# names become unique per project: older code would see and overwrite other projects' datasets.
older_code_may_run: bool = False


def upgrade() -> None:
    op.add_column("datasets", sa.Column("project", sa.String(128), nullable=False, server_default="default"))
    op.add_column("dataset_queries", sa.Column("project", sa.String(128), nullable=False, server_default="default"))
    # Rows written by a key bound to a project (keys stored in the database) go to that project; the
    # others (unbound or configured keys) to 'default'.
    for table in ("datasets", "dataset_queries"):
        op.execute(
            f"UPDATE {table} AS t SET project = k.project FROM api_keys AS k "
            "WHERE k.project IS NOT NULL AND t.created_by = k.id::text"
        )
    op.drop_constraint("uq_datasets_name", "datasets", type_="unique")
    op.create_unique_constraint("uq_datasets_project_name", "datasets", ["project", "name"])


def downgrade() -> None:
    # Names are unique per project; going back keeps one row per name (the oldest).
    op.execute(
        "DELETE FROM datasets AS d USING datasets AS o "
        "WHERE d.name = o.name AND (d.created_at, d.id::text) > (o.created_at, o.id::text)"
    )
    op.drop_constraint("uq_datasets_project_name", "datasets", type_="unique")
    op.create_unique_constraint("uq_datasets_name", "datasets", ["name"])
    op.drop_column("dataset_queries", "project")
    op.drop_column("datasets", "project")
