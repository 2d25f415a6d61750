"""graph: the entities' lexical HNSW index moves to a side table filled in the background

Revision ID: graph_0006_lexical_side
Revises: graph_0005_gin_bounded_list
Create Date: 2026-11-28

Inserting a row into an HNSW index walks the graph to place it: for a bulk `create_entities`, most of
the statement's time. The index now lives on `graph_entity_lexical` (the entity's id, the columns a
search filters on, and its `lexical` vector), which a background mover fills
(`app.core.embeddings.lexical_mover`). Triggers list every new entity, and every entity whose text
(`tsv`), project or type changed, in `graph_entity_lexical_pending` with a version; a search scores
the pending entities exactly beside the index scan of the others (`LexicalIndex.top_sql`), so an
entity is found from the moment its write commits. Existing entities are copied here, before the
side table's index is built in one pass.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "graph_0006_lexical_side"
down_revision: str | None = "graph_0005_gin_bounded_list"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# Expand/contract (docs/reliability.md): older code reads `graph_entities.lexical`, still there and
# still current; without its index there, an older host's text search scans the project's entities
# (exact, slower) until it is replaced. Older hosts' writes are listed by the triggers like any other.
older_code_may_run: bool = True

QUEUE_NEW = """
CREATE FUNCTION graph_entity_lexical_queue_new() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO graph_entity_lexical_pending AS p (id)
    SELECT id FROM added ORDER BY id
    ON CONFLICT (id) DO UPDATE SET ver = p.ver + 1, queued_at = now();
    RETURN NULL;
END $$
"""
# Only a change of what the side table holds lists an entity again (a status or access-time update does not).
QUEUE_CHANGED = """
CREATE FUNCTION graph_entity_lexical_queue_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO graph_entity_lexical_pending AS p (id)
    SELECT n.id FROM after_rows n JOIN before_rows o ON o.id = n.id
    WHERE n.tsv IS DISTINCT FROM o.tsv OR n.project_id IS DISTINCT FROM o.project_id
       OR n.entity_type IS DISTINCT FROM o.entity_type
    ORDER BY n.id
    ON CONFLICT (id) DO UPDATE SET ver = p.ver + 1, queued_at = now();
    RETURN NULL;
END $$
"""


def upgrade() -> None:
    op.execute(
        """CREATE TABLE graph_entity_lexical (
               id BIGINT PRIMARY KEY REFERENCES graph_entities(id) ON DELETE CASCADE,
               project_id UUID NOT NULL,
               entity_type TEXT NOT NULL,
               lexical sparsevec(1000000000))"""
    )
    # No foreign key: a deleted entity's line is dropped by the mover, and a write pays no check for it.
    op.execute(
        """CREATE TABLE graph_entity_lexical_pending (
               id BIGINT PRIMARY KEY,
               ver BIGINT NOT NULL DEFAULT 0,
               queued_at TIMESTAMPTZ NOT NULL DEFAULT now())"""
    )
    op.execute(QUEUE_NEW)
    op.execute(QUEUE_CHANGED)
    op.execute(
        "CREATE TRIGGER graph_entity_lexical_new AFTER INSERT ON graph_entities "
        "REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION graph_entity_lexical_queue_new()"
    )
    op.execute(
        "CREATE TRIGGER graph_entity_lexical_changed AFTER UPDATE ON graph_entities "
        "REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows "
        "FOR EACH STATEMENT EXECUTE FUNCTION graph_entity_lexical_queue_changed()"
    )
    op.execute(
        "INSERT INTO graph_entity_lexical (id, project_id, entity_type, lexical) "
        "SELECT id, project_id, entity_type, lexical FROM graph_entities ORDER BY id"
    )
    # As graph_0003 built it on the entities (m 8 / ef_construction 32).
    op.execute(
        "CREATE INDEX ix_graph_entity_lexical ON graph_entity_lexical USING hnsw (lexical sparsevec_ip_ops) "
        "WITH (m = 8, ef_construction = 32)"
    )
    op.execute("ANALYZE graph_entity_lexical")  # a search plans on the index at once (lexical_mover)
    op.execute("DROP INDEX IF EXISTS ix_graph_entities_lexical")


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS graph_entity_lexical_changed ON graph_entities")
    op.execute("DROP TRIGGER IF EXISTS graph_entity_lexical_new ON graph_entities")
    op.execute("DROP FUNCTION IF EXISTS graph_entity_lexical_queue_changed()")
    op.execute("DROP FUNCTION IF EXISTS graph_entity_lexical_queue_new()")
    op.execute("DROP TABLE IF EXISTS graph_entity_lexical_pending")
    op.execute("DROP TABLE IF EXISTS graph_entity_lexical")
    op.execute(
        "CREATE INDEX ix_graph_entities_lexical ON graph_entities USING hnsw (lexical sparsevec_ip_ops) "
        "WITH (m = 8, ef_construction = 32)"
    )
