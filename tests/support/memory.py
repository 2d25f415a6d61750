"""Helpers of the memory end-to-end tests: REST calls and a small set of notes."""

from __future__ import annotations

import random
from typing import Any

import httpx

NOTES = [
    ("The deployment of version 2.3 failed because the database migration timed out.", ["deploy", "ops"]),
    ("We rolled back the release and increased the statement timeout to sixty seconds.", ["deploy"]),
    ("Lunch with the design team: they want a darker theme for the dashboard.", ["design"]),
    ("The migration succeeded on the second attempt after the timeout change.", ["deploy", "ops"]),
    ("Octopuses have three hearts and blue blood.", ["trivia"]),
]


async def api(
    rest: httpx.AsyncClient, path: str, body: dict[str, Any] | None = None, *, status: int = 200, method: str = "POST"
) -> dict[str, Any]:
    """One REST call under /api/v1 that must answer `status`; its JSON body."""
    r = await rest.request(
        method, f"/api/v1{path}", json=body if method != "GET" else None, params=body if method == "GET" else None
    )
    assert r.status_code == status, r.text
    data: dict[str, Any] = r.json()
    return data


async def seed_notes(rest: httpx.AsyncClient, project: str = "ops") -> None:
    """Push NOTES into `project` as episodic memories."""
    for text, tags in NOTES:
        out = await api(rest, "/memory/push", {"text": text, "project": project, "type": "episodic", "tags": tags})
        assert out["inserted"] == 1


FLOOD_SYLLABLES = [a + b for a in "bdfgklmnprstvz" for b in "aeiou"]


def flood_document(rng: random.Random, chars: int = 3_000) -> str:
    """New text of about `chars` characters (3,000: about 9 chunks of 200 tokens) whose words no other
    document shares, so that every chunk of it is queued for a vector: a flooding key's push."""
    words: list[str] = []
    size = 0
    while size < chars:
        word = "".join(rng.choices(FLOOD_SYLLABLES, k=3)) + str(rng.randint(0, 999_999))
        words.append(word)
        size += len(word) + 1
    return " ".join(words)
