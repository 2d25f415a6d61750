"""app/graph/operations_reference.py: the reference memory server's nine tools answer with its exact text
shapes: a JSON array for creations, its sentence for deletions, and the graph as JSON with any notice
as a second text item."""

from __future__ import annotations

import json

from app.core.registry import Operation
from app.graph.operations import ops
from app.graph.operations_reference import TOOLSET
from app.graph.schemas import EntityOut, RelationOut
from app.graph.schemas_reference import RefDeletedOut, RefEntitiesOut, RefGraphOut, RefRelationsOut

ADA = EntityOut(name="Ada", entityType="person", observations=["wrote notes"])
LINK = RelationOut(from_entity="Ada", to_entity="Engine", relationType="programmed")


def _tools() -> dict[str, Operation]:
    return {op.tool_name or op.name: op for op in ops.operations if TOOLSET in op.toolsets}


def _text(tool: str, result: object) -> list[str]:
    renderer = _tools()[tool].text
    assert renderer is not None, tool
    return renderer(result)  # type: ignore[arg-type]


def test_the_nine_reference_tools_keep_their_names_and_have_a_text_shape() -> None:
    assert set(_tools()) == {
        "create_entities",
        "create_relations",
        "add_observations",
        "delete_entities",
        "delete_observations",
        "delete_relations",
        "read_graph",
        "search_nodes",
        "open_nodes",
    }
    assert all(op.text is not None for op in _tools().values())


def test_creations_answer_with_the_json_array_alone() -> None:
    assert _text("create_entities", RefEntitiesOut(entities=[ADA])) == [
        '[{"name":"Ada","entityType":"person","observations":["wrote notes"]}]'
    ]
    [relations] = _text("create_relations", RefRelationsOut(relations=[LINK]))
    assert json.loads(relations) == [{"from": "Ada", "to": "Engine", "relationType": "programmed"}]


def test_deletions_answer_with_their_sentence() -> None:
    done = RefDeletedOut(success=True, message="Entities deleted successfully")
    assert _text("delete_entities", done) == ["Entities deleted successfully"]
    assert _text("delete_relations", RefDeletedOut(success=True, message="Relations deleted successfully")) == [
        "Relations deleted successfully"
    ]


def test_the_graph_is_json_with_a_notice_as_a_second_item() -> None:
    plain = _text("read_graph", RefGraphOut(entities=[ADA], relations=[LINK]))
    assert len(plain) == 1 and json.loads(plain[0]) == {
        "entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote notes"]}],
        "relations": [{"from": "Ada", "to": "Engine", "relationType": "programmed"}],
    }
    noted = _text("search_nodes", RefGraphOut(entities=[], relations=[], notice="cut to fit 20,000 tokens"))
    assert json.loads(noted[0]) == {"entities": [], "relations": []} and noted[1] == "cut to fit 20,000 tokens"
