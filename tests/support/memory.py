"""Helpers of the memory end-to-end tests: REST calls and a small set of notes."""

from __future__ import annotations

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
