"""core: per-key limits shared by every process of a fleet (`app.core.fleet_limits`)

Revision ID: core_0006
Revises: core_0005
Create Date: 2026-11-27

- `limit_buckets`: a token bucket per API key; processes lease small batches of tokens from it.
- `limit_slots`: the long-job and event-stream slots held now, each with a lease its process renews.
- `limit_auth_failures`: the recent failed authentications of each client address.

The tables are UNLOGGED: their rows are short-lived counters that need no WAL, no replica copy and
no survival of a crash (PostgreSQL empties them after one, which frees every slot and lockout).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "core_0006"
down_revision: str | None = "core_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# New tables only: code built before this revision never reads them.
older_code_may_run: bool = True


def upgrade() -> None:
    op.execute(
        "CREATE UNLOGGED TABLE limit_buckets ("
        " key text PRIMARY KEY,"
        " tokens double precision NOT NULL,"
        " granted integer NOT NULL DEFAULT 0,"
        " updated_at timestamptz NOT NULL DEFAULT clock_timestamp())"
    )
    op.execute("CREATE INDEX ix_limit_buckets_updated_at ON limit_buckets (updated_at)")
    op.execute(
        "CREATE UNLOGGED TABLE limit_slots ("
        " id uuid PRIMARY KEY,"
        " kind text NOT NULL,"
        " key text NOT NULL,"
        " holder text NOT NULL,"
        " expires_at timestamptz NOT NULL)"
    )
    op.execute("CREATE INDEX ix_limit_slots_kind_key ON limit_slots (kind, key)")
    op.execute("CREATE INDEX ix_limit_slots_expires_at ON limit_slots (expires_at)")
    op.execute(
        "CREATE UNLOGGED TABLE limit_auth_failures ("
        " client text PRIMARY KEY,"
        " failures timestamptz[] NOT NULL,"
        " updated_at timestamptz NOT NULL DEFAULT now())"
    )
    op.execute("CREATE INDEX ix_limit_auth_failures_updated_at ON limit_auth_failures (updated_at)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS limit_auth_failures")
    op.execute("DROP TABLE IF EXISTS limit_slots")
    op.execute("DROP TABLE IF EXISTS limit_buckets")
