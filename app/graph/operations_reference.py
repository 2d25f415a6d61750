"""The `reference` toolset: the reference memory server's nine tools, names and shapes unchanged.

A client written for `@modelcontextprotocol/server-memory` connects to `/mcp/reference` and works as
before: same tool names, arguments, result shapes and text content (the create tools answer with a
JSON array, deletions with a sentence), unknown argument keys ignored, an empty `search_nodes` query
allowed. Everything is stored in Cairn's graph (the caller's project), so the graph toolset sees it
too. REST has no separate routes for these: the graph routes under `/api/v1/graph` are their twins.
"""

from __future__ import annotations

from pydantic import BaseModel

from app.core.budget import dumps
from app.core.context import CallContext
from app.core.registry import OperationSet, TextRenderer
from app.graph import service_reference as service
from app.graph.schemas_reference import (
    RefAddObservationsIn,
    RefCreateEntitiesIn,
    RefCreateRelationsIn,
    RefDeletedOut,
    RefDeleteEntitiesIn,
    RefDeleteObservationsIn,
    RefDeleteRelationsIn,
    RefEntitiesOut,
    RefGraphOut,
    RefObservationsOut,
    RefOpenNodesIn,
    RefReadGraphIn,
    RefRelationsOut,
    RefSearchNodesIn,
)

__all__ = ["TOOLSET", "ops"]

TOOLSET = "reference"
ops = OperationSet("graph")  # included by app/graph/operations.py
ops.toolset(
    TOOLSET,
    "The reference memory server's nine tools with its exact shapes (a drop-in; stored in the graph).",
    exclusive_of=("graph",),
    output_schemas=True,
)


def _list_text(field: str) -> TextRenderer:
    """The text content is the JSON array in `field` of the result (the reference's shape)."""

    def render(result: BaseModel) -> list[str]:
        return [dumps(result.model_dump(mode="json", by_alias=True)[field])]

    return render


def _message_text(result: BaseModel) -> list[str]:
    """The text content is the sentence the reference answers deletions with."""
    return [str(getattr(result, "message", ""))]


def _graph_text(result: BaseModel) -> list[str]:
    """The graph as JSON, then (as a second text item, so the JSON stays parseable) any notice."""
    notice = getattr(result, "notice", None)
    return [dumps(result.model_dump(mode="json", by_alias=True)), *([notice] if notice else [])]


@ops.operation(
    name="reference_create_entities",
    tool_name="create_entities",
    title="Create Entities",
    input=RefCreateEntitiesIn,
    output=RefEntitiesOut,
    path="/reference/create_entities",
    toolsets=(TOOLSET,),
    rest=False,
    plain=True,
    text=_list_text("entities"),
)
async def create_entities(ctx: CallContext, args: RefCreateEntitiesIn) -> RefEntitiesOut:
    """Create multiple new entities in the knowledge graph (names that exist are left as they are)."""
    return await service.create_entities(ctx, args)


@ops.operation(
    name="reference_create_relations",
    tool_name="create_relations",
    title="Create Relations",
    input=RefCreateRelationsIn,
    output=RefRelationsOut,
    path="/reference/create_relations",
    toolsets=(TOOLSET,),
    rest=False,
    plain=True,
    text=_list_text("relations"),
)
async def create_relations(ctx: CallContext, args: RefCreateRelationsIn) -> RefRelationsOut:
    """Create multiple new relations between existing entities in the knowledge graph. Relations should
    be in active voice."""
    return await service.create_relations(ctx, args)


@ops.operation(
    name="reference_add_observations",
    tool_name="add_observations",
    title="Add Observations",
    input=RefAddObservationsIn,
    output=RefObservationsOut,
    path="/reference/add_observations",
    toolsets=(TOOLSET,),
    rest=False,
    text=_list_text("results"),
)
async def add_observations(ctx: CallContext, args: RefAddObservationsIn) -> RefObservationsOut:
    """Add new observations to existing entities in the knowledge graph."""
    return await service.add_observations(ctx, args)


@ops.operation(
    name="reference_delete_entities",
    tool_name="delete_entities",
    title="Delete Entities",
    input=RefDeleteEntitiesIn,
    output=RefDeletedOut,
    path="/reference/delete_entities",
    destructive=True,
    idempotent=True,
    toolsets=(TOOLSET,),
    rest=False,
    text=_message_text,
)
async def delete_entities(ctx: CallContext, args: RefDeleteEntitiesIn) -> RefDeletedOut:
    """Delete multiple entities and their associated relations from the knowledge graph."""
    return await service.delete_entities(ctx, args)


@ops.operation(
    name="reference_delete_observations",
    tool_name="delete_observations",
    title="Delete Observations",
    input=RefDeleteObservationsIn,
    output=RefDeletedOut,
    path="/reference/delete_observations",
    destructive=True,
    idempotent=True,
    toolsets=(TOOLSET,),
    rest=False,
    text=_message_text,
)
async def delete_observations(ctx: CallContext, args: RefDeleteObservationsIn) -> RefDeletedOut:
    """Delete specific observations from entities in the knowledge graph."""
    return await service.delete_observations(ctx, args)


@ops.operation(
    name="reference_delete_relations",
    tool_name="delete_relations",
    title="Delete Relations",
    input=RefDeleteRelationsIn,
    output=RefDeletedOut,
    path="/reference/delete_relations",
    destructive=True,
    idempotent=True,
    toolsets=(TOOLSET,),
    rest=False,
    text=_message_text,
)
async def delete_relations(ctx: CallContext, args: RefDeleteRelationsIn) -> RefDeletedOut:
    """Delete multiple relations from the knowledge graph."""
    return await service.delete_relations(ctx, args)


@ops.operation(
    name="reference_read_graph",
    tool_name="read_graph",
    title="Read Graph",
    input=RefReadGraphIn,
    output=RefGraphOut,
    path="/reference/read_graph",
    read_only=True,
    toolsets=(TOOLSET,),
    rest=False,
    text=_graph_text,
)
async def read_graph(ctx: CallContext, args: RefReadGraphIn) -> RefGraphOut:
    """Read the entire knowledge graph (a graph too large for one reply comes in parts; the reply says
    how to get the rest)."""
    return await service.read_graph(ctx, args)


@ops.operation(
    name="reference_search_nodes",
    tool_name="search_nodes",
    title="Search Nodes",
    input=RefSearchNodesIn,
    output=RefGraphOut,
    path="/reference/search_nodes",
    read_only=True,
    toolsets=(TOOLSET,),
    rest=False,
    text=_graph_text,
)
async def search_nodes(ctx: CallContext, args: RefSearchNodesIn) -> RefGraphOut:
    """Search for nodes in the knowledge graph based on a query."""
    return await service.search_nodes(ctx, args)


@ops.operation(
    name="reference_open_nodes",
    tool_name="open_nodes",
    title="Open Nodes",
    input=RefOpenNodesIn,
    output=RefGraphOut,
    path="/reference/open_nodes",
    read_only=True,
    toolsets=(TOOLSET,),
    rest=False,
    text=_graph_text,
)
async def open_nodes(ctx: CallContext, args: RefOpenNodesIn) -> RefGraphOut:
    """Open specific nodes in the knowledge graph by their names."""
    return await service.open_nodes(ctx, args)
