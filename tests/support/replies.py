"""Helpers of the tests on search replies: the lines of a cited context block, and the check that a
reply states its own size."""

from __future__ import annotations

import json
import re
from typing import Any

from app.core.budget import dumps
from app.core.embeddings.tokens import count_tokens

CITED_LINE = re.compile(r"\[(\d+)\] (.*)")


def cited(context: str | None) -> dict[int, str]:
    """The lines of a context block by citation number: `[n] text` -> {n: text}."""
    lines: dict[int, str] = {}
    for line in (context or "").split("\n"):
        if not line:
            continue
        found = CITED_LINE.fullmatch(line)
        assert found, f"not a cited line: {line!r}"
        lines[int(found[1])] = found[2]
    return lines


def hit_texts(body: dict[str, Any]) -> list[str | None]:
    """Each result's text in a memory search reply: the context line cited with its position."""
    lines = cited(body.get("context"))
    return [lines.get(n) for n in range(1, len(body["results"]) + 1)]


def assert_states_its_size(sent: str, field: str = "tokens") -> dict[str, Any]:
    """`sent` (a reply's JSON text as it went out) holds its own token count in `field`: exactly, or one
    under when no value equals the count of the reply holding it (app.core.budget.finalize). Returns the
    parsed reply."""
    body: dict[str, Any] = json.loads(sent)
    assert dumps(body) == sent, "the reply is not compact JSON"
    size = count_tokens(sent)
    if body[field] != size:
        assert body[field] == size - 1, (body[field], size)
        assert all(count_tokens(dumps({**body, field: v})) != v for v in range(size - 5, size + 6))
    return body
