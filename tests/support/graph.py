"""Helpers of the graph end-to-end tests: a small graph and MCP calls that must succeed."""

from __future__ import annotations

import json
from typing import Any

from tests.support.server import text_of

API = "/api/v1/graph"

PEOPLE = [
    {
        "name": "Ada Lovelace",
        "entityType": "person",
        "observations": ["Wrote the first published algorithm for a machine", "Worked with Charles Babbage"],
    },
    {
        "name": "Charles Babbage",
        "entityType": "person",
        "observations": ["Designed the Analytical Engine", "Mathematician from London"],
    },
    {
        "name": "Analytical Engine",
        "entityType": "machine",
        "observations": ["A proposed mechanical general-purpose computer"],
    },
    {
        "name": "Sourdough",
        "entityType": "recipe",
        "observations": ["Bread leavened with a wild yeast starter", "Needs a long fermentation"],
    },
]


async def call(mcp: Any, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """Call a tool that must succeed; its structured content (equal to its text)."""
    res = await mcp.call_tool(tool, args)
    assert not res.is_error, text_of(res)
    data: dict[str, Any] = res.structured_content
    assert json.loads(text_of(res)) == data
    return data


async def seed(mcp: Any, project: str | None = None) -> None:
    """Create PEOPLE and two relations between them."""
    extra = {"project": project} if project else {}
    await call(mcp, "create_entities", {"entities": PEOPLE, **extra})
    await call(
        mcp,
        "create_relations",
        {
            "relations": [
                {"from": "Ada Lovelace", "to": "Charles Babbage", "relationType": "worked with"},
                {"from": "Charles Babbage", "to": "Analytical Engine", "relationType": "designed"},
            ],
            **extra,
        },
    )
