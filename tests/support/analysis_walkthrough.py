"""The library-audit walkthrough (docs/analysis.md) as code: the eight tool calls of the seed's
session, with the size of every response in embedding-tokenizer tokens.

`run_walkthrough(call)` takes any `call(tool_name, arguments) -> response text` coroutine, so the
same steps run through MCP (tests, benchmarks) or REST.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from app.core.embeddings.tokens import count_tokens

AID = "library-audit-2026-05"

STEPS: list[tuple[str, str, dict[str, Any]]] = [
    (
        "1 ingest",
        "analysis_ingest",
        {
            "analysis_id": AID,
            "model": "book",
            "ingest_all": True,
            "per_page": 100,
            "fields": ["id", "title", "author", "status", "rating", "updated_at"],
        },
    ),
    ("2 describe", "analysis_query", {"analysis_id": AID, "mode": "describe"}),
    ("3 aggregate", "analysis_query", {"analysis_id": AID, "mode": "aggregate", "group_by": "status"}),
    (
        "4 filter",
        "analysis_query",
        {"analysis_id": AID, "mode": "filter", "where": {"status": "completed", "rating": {"$lt": 2}}, "limit": 20},
    ),
    ("5 sample", "analysis_query", {"analysis_id": AID, "mode": "sample", "sample_size": 9, "stratify_by": "status"}),
    (
        "6 store",
        "analysis_store",
        {
            "analysis_id": AID,
            "findings": [
                {
                    "finding": "Rating quality issue: completed books rated 1 star are outliers "
                    "worth a re-read or de-listing",
                    "category": "quality_issue",
                    "metadata": {"query": "status=completed, rating<2"},
                },
                {
                    "finding": "Sci-fi is over-represented in 'reading' status: possible stalled-progress bias",
                    "category": "pattern",
                },
            ],
        },
    ),
    (
        "7 semantic",
        "analysis_query",
        {"analysis_id": AID, "mode": "semantic", "query": "issues with rating or quality", "top_k": 20},
    ),
    ("8 clear", "analysis_clear", {"analysis_id": AID}),
]


@dataclass
class StepResult:
    """One walkthrough call and the size of its answer."""

    step: str
    tool: str
    tokens: int
    chars: int
    response: dict[str, Any]


async def run_walkthrough(call: Callable[[str, dict[str, Any]], Awaitable[str]]) -> list[StepResult]:
    """Run the eight steps in order; each answer's tokens are counted on the exact text returned."""
    results = []
    for step, tool, args in STEPS:
        body = await call(tool, args)
        results.append(
            StepResult(step=step, tool=tool, tokens=count_tokens(body), chars=len(body), response=json.loads(body))
        )
    return results


def markdown_table(results: list[StepResult]) -> str:
    """A table of the steps with the total."""
    lines = ["| step | tool | tokens | characters |", "| --- | --- | ---: | ---: |"]
    lines += [f"| {r.step} | {r.tool} | {r.tokens} | {r.chars} |" for r in results]
    lines.append(f"| **total** | | **{sum(r.tokens for r in results)}** | {sum(r.chars for r in results)} |")
    return "\n".join(lines)
