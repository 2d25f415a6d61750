"""Graph: a knowledge graph of entities, observations and relations with hybrid search and limbic
re-ranking (seed 003), a drop-in for the reference memory server."""

from __future__ import annotations

from app.core.feature import Feature
from app.graph import cli, pages
from app.graph.config import GraphSettings
from app.graph.operations import ops
from app.graph.repository_search import ENTITY_LEXICAL
from app.graph.service_common import EMBEDDING_TARGETS

FEATURE = Feature(
    name="graph",
    operations=ops,
    settings=GraphSettings,
    cli=cli.register,
    embedding_targets=EMBEDDING_TARGETS,
    lexical_indexes=(ENTITY_LEXICAL,),
    console=pages.SECTIONS,
)
