"""analysis: every live analysis_act run recorded per session

Revision ID: analysis_0003_act_runs
Revises: analysis_0002_lexical
Create Date: 2026-11-27

`analysis_act_runs` holds one row per live act, whatever the transport (MCP, REST, console): what it
did (model, action, where, attributes), when, by which key, its outcome counts and the ids that failed
or ended unknown. analysis_act_runs and the console's session page read it. A run expires with the
session's records (`CAIRN_ANALYSIS_RECORDS_RETENTION_DAYS`), not at analysis_clear: it is the record
of what was changed upstream.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "analysis_0003_act_runs"
down_revision: str | None = "analysis_0002_lexical"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Expand/contract (docs/reliability.md): a new table only; older code never reads it.
older_code_may_run: bool = True


def upgrade() -> None:
    op.create_table(
        "analysis_act_runs",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("project_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("analysis_id", sa.String(128), nullable=False),
        sa.Column("model", sa.String(64), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("where", postgresql.JSONB(), nullable=True),
        sa.Column("attributes", postgresql.JSONB(), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("key_id", sa.String(200), nullable=True),
        sa.Column("key_name", sa.String(200), nullable=False),
        sa.Column("transport", sa.String(16), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("succeeded", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("unknown", sa.Integer(), nullable=False),
        sa.Column("not_attempted", sa.Integer(), nullable=False),
        sa.Column("already_done", sa.Integer(), nullable=False),
        sa.Column("deadline_reached", sa.Boolean(), nullable=False),
        sa.Column("failed_ids", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("unknown_ids", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("errors", postgresql.JSONB(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_analysis_act_runs"),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], ondelete="CASCADE", name="fk_analysis_act_runs_project_id_projects"
        ),
    )
    op.execute("CREATE INDEX ix_analysis_act_runs_session ON analysis_act_runs (project_id, analysis_id, id)")
    op.execute("CREATE INDEX ix_analysis_act_runs_expires ON analysis_act_runs (expires_at)")


def downgrade() -> None:
    op.drop_table("analysis_act_runs")
