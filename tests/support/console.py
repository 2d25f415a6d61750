"""The console over plain HTTP (no browser): sign in through its form, then read pages and post forms
with the session's CSRF token, as the mirror tests of the console's page modules do."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import httpx

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Console:
    """A signed-in console session (its cookies in `client`)."""

    client: httpx.AsyncClient

    async def page(self, path: str, status: int = 200, **params: Any) -> str:
        """The HTML of a console page, checked to answer `status`."""
        r = await self.client.get(path, params=params)
        assert r.status_code == status, (r.status_code, r.text[:500])
        return r.text

    async def csrf(self) -> str:
        """The session's CSRF token, read from a page's form."""
        found = CSRF.search(await self.page("/ui/"))
        assert found is not None
        return found.group(1)

    async def post(self, path: str, data: dict[str, Any] | None = None, **params: Any) -> httpx.Response:
        """Post a form (the CSRF token added); the response is returned as it is (redirects not followed)."""
        return await self.client.post(path, params=params, data={**(data or {}), "csrf": await self.csrf()})

    def flash(self, response: httpx.Response) -> str:
        """The one-time message a redirect carries to the next page."""
        return unquote(response.cookies.get("cairn_flash") or "")


@asynccontextmanager
async def signed_in(base_url: str, key: str) -> AsyncIterator[Console]:
    """A console session signed in with `key`."""
    # A browser sends the page's origin with every form; the console refuses forms without it.
    async with httpx.AsyncClient(base_url=base_url, timeout=60, headers={"Origin": base_url}) as client:
        login = await client.get("/ui/login")
        found = CSRF.search(login.text)
        assert found is not None, login.text[:500]
        r = await client.post("/ui/login", data={"key": key, "csrf": found.group(1), "next": "/ui/"})
        assert r.status_code == 303, r.text[:500]
        yield Console(client)
