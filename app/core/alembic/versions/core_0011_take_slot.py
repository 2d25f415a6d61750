"""core: `take_limit_slot`, a slot claim in one statement

Revision ID: core_0011_take_slot
Revises: core_0010_queue_owner
Create Date: 2026-11-28

A fleet slot (`app.core.fleet_limits.FleetSlots`) was claimed in a transaction of its own: BEGIN, the
key's advisory lock, the count and the insert, COMMIT, four round trips before every long-running
call. The function does the same in one statement. Each of its statements reads a fresh snapshot
(PL/pgSQL, read committed), so the count after the lock sees every claim committed before it, as the
separate statements did; the lock is the same one, so code built before this revision and this code
count each other's claims during a rolling deploy.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "core_0011_take_slot"
down_revision: str | None = "core_0010_queue_owner"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# A new function only.
older_code_may_run: bool = True

TAKE_LIMIT_SLOT = """
CREATE OR REPLACE FUNCTION take_limit_slot(
    slot uuid, slot_kind text, slot_key text, slot_holder text, slot_limit integer, ttl float8
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('cairn-slot:' || slot_kind || ':' || slot_key, 0));
    DELETE FROM limit_slots WHERE kind = slot_kind AND key = slot_key AND expires_at <= now();
    IF (SELECT count(*) FROM limit_slots WHERE kind = slot_kind AND key = slot_key) >= slot_limit THEN
        RETURN false;
    END IF;
    INSERT INTO limit_slots (id, kind, key, holder, expires_at)
    VALUES (slot, slot_kind, slot_key, slot_holder, now() + make_interval(secs => ttl));
    RETURN true;
END
$$
"""


def upgrade() -> None:
    op.execute(TAKE_LIMIT_SLOT)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS take_limit_slot(uuid, text, text, text, integer, float8)")
