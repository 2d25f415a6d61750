"""Inputs and outputs of the reference-compatible toolset (`/mcp/reference`).

They mirror the reference memory server's tools field for field, and are lenient as it is: unknown
keys are ignored instead of refused. Cairn's limits (name and text lengths, list sizes) still hold.
Fields a caller may send but the reference does not declare (`offset`, to continue a reply that was
cut) are accepted without being advertised.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from app.graph.schemas import AddedObservations, EntityOut, Name, ObservationText, RelationOut, TypeName


class Lenient(BaseModel):
    """Arguments that ignore keys they do not know."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True, populate_by_name=True)


class RefEntity(Lenient):
    """An entity as the reference server takes it."""

    name: Name = Field(description="The name of the entity")
    entityType: TypeName = Field(description="The type of the entity")
    observations: list[ObservationText] = Field(
        max_length=500, description="An array of observation contents associated with the entity"
    )


class RefRelation(Lenient):
    """A relation as the reference server takes it."""

    from_entity: Name = Field(alias="from", description="The name of the entity where the relation starts")
    to_entity: Name = Field(alias="to", description="The name of the entity where the relation ends")
    relationType: TypeName = Field(description="The type of the relation")


class RefCreateEntitiesIn(Lenient):
    """Arguments of create_entities."""

    entities: list[RefEntity] = Field(max_length=500)


class RefCreateRelationsIn(Lenient):
    """Arguments of create_relations."""

    relations: list[RefRelation] = Field(max_length=1000)


class RefObservationAdd(Lenient):
    """Observations to add to one entity."""

    entityName: Name = Field(description="The name of the entity to add the observations to")
    contents: list[ObservationText] = Field(max_length=500, description="An array of observation contents to add")


class RefAddObservationsIn(Lenient):
    """Arguments of add_observations."""

    observations: list[RefObservationAdd] = Field(max_length=500)


class RefDeleteEntitiesIn(Lenient):
    """Arguments of delete_entities."""

    entityNames: list[Name] = Field(max_length=1000, description="An array of entity names to delete")


class RefDeletion(Lenient):
    """Observations to delete from one entity."""

    entityName: Name = Field(description="The name of the entity containing the observations")
    observations: list[str] = Field(max_length=1000, description="An array of observations to delete")


class RefDeleteObservationsIn(Lenient):
    """Arguments of delete_observations."""

    deletions: list[RefDeletion] = Field(max_length=500)


class RefDeleteRelationsIn(Lenient):
    """Arguments of delete_relations."""

    relations: list[RefRelation] = Field(max_length=1000, description="An array of relations to delete")


class RefReadGraphIn(Lenient):
    """Arguments of read_graph: none advertised; `offset` continues a reply that was cut."""

    offset: SkipJsonSchema[int] = Field(default=0, ge=0)


class RefSearchNodesIn(Lenient):
    """Arguments of search_nodes (an empty query lists every entity, bounded like read_graph)."""

    query: str = Field(
        max_length=2048,
        description="The search query to match against entity names, types, and observation content",
    )
    offset: SkipJsonSchema[int] = Field(default=0, ge=0)


class RefOpenNodesIn(Lenient):
    """Arguments of open_nodes."""

    names: list[Name] = Field(max_length=100, description="An array of entity names to retrieve")


class RefEntitiesOut(BaseModel):
    """The entities that were created."""

    entities: list[EntityOut]


class RefRelationsOut(BaseModel):
    """The relations that were created."""

    relations: list[RelationOut]


class RefObservationsOut(BaseModel):
    """The observations added per entity."""

    results: list[AddedObservations]


class RefDeletedOut(BaseModel):
    """The reference server's answer to a deletion."""

    success: bool
    message: str


class RefGraphOut(BaseModel):
    """Entities and relations, exactly the reference shape; `notice` (not part of the structured
    result) tells the model in plain words when the reply was cut and how to get the rest."""

    entities: list[EntityOut]
    relations: list[RelationOut]
    notice: SkipJsonSchema[str | None] = Field(default=None, exclude=True)
