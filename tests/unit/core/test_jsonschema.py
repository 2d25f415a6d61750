"""app/core/jsonschema.py: the lean form of Pydantic schemas."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.core.jsonschema import example_of, lean, size


class Window(BaseModel):
    """A time window."""

    start: str | None = None
    end: str | None = None


class Doc(BaseModel):
    """A document with a property called title."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(description="The document's title (a property, kept)")
    window: Window | None = Field(default=None, description="Optional window")
    kind: Literal["a", "b"] = "a"
    limit: int | None = Field(default=None, ge=1)
    tags: list[str] | str = Field(default_factory=list)


class Node(BaseModel):
    """A recursive structure."""

    name: str
    children: list[Node] = Field(default_factory=list)


def test_lean_inlines_refs_drops_noise_and_keeps_meaning() -> None:
    schema = lean(Doc.model_json_schema())
    assert schema == {
        "description": "A document with a property called title.",
        "properties": {
            "title": {"description": "The document's title (a property, kept)", "type": "string"},
            "window": {
                "description": "Optional window",
                "properties": {"start": {"type": "string"}, "end": {"type": "string"}},
                "type": "object",
            },
            "kind": {"default": "a", "enum": ["a", "b"], "type": "string"},
            "limit": {"minimum": 1, "type": "integer"},
            "tags": {"anyOf": [{"items": {"type": "string"}, "type": "array"}, {"type": "string"}]},
        },
        "required": ["title"],
        "type": "object",
    }
    assert size(schema) < size(Doc.model_json_schema()) * 0.7


def test_a_recursive_definition_stays_in_defs() -> None:
    schema = lean(Node.model_json_schema())
    assert schema["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
    assert set(schema["$defs"]) == {"Node"}
    assert "title" not in schema["$defs"]["Node"]


def test_single_allof_is_merged_and_siblings_win() -> None:
    raw = {
        "$defs": {"Inner": {"title": "Inner", "type": "object", "description": "inner doc"}},
        "type": "object",
        "properties": {"x": {"allOf": [{"$ref": "#/$defs/Inner"}], "description": "outer doc"}},
    }
    assert lean(raw) == {"type": "object", "properties": {"x": {"type": "object", "description": "outer doc"}}}


def test_example_of_fills_required_fields_within_bounds() -> None:
    schema = {
        "type": "object",
        "required": ["name", "limit", "tags", "mode", "when", "nested"],
        "properties": {
            "name": {"type": "string", "minLength": 10, "maxLength": 12},
            "limit": {"type": "integer", "minimum": 5, "maximum": 50},
            "tags": {"type": "array", "items": {"type": "string"}},
            "mode": {"enum": ["fast", "slow"]},
            "when": {"anyOf": [{"type": "null"}, {"type": "string", "format": "date-time"}]},
            "nested": {"type": "object", "required": ["on"], "properties": {"on": {"type": "boolean"}}},
            "optional": {"type": "string"},
        },
    }
    assert example_of(schema) == {
        "name": "examplexxx",
        "limit": 5,
        "tags": ["example"],
        "mode": "fast",
        "when": "2026-01-01T00:00:00Z",
        "nested": {"on": False},
    }
    assert example_of({"type": "string", "examples": ["given"], "default": "d"}) == "given"
    assert example_of({"type": "integer", "default": 7}) == 7
