"""Behind a proxy (issue 41 #9): a real `cairn serve` takes the client address from `X-Forwarded-For`
only from a peer `FORWARDED_ALLOW_IPS` trusts, so the failed-authentication limit counts the proxy's
clients apart; and a valid key is never refused by that limit, even one the host has not looked up."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.e2e.test_fleet_limits import fleet_env
from tests.support.hosts import Fleet
from tests.support.server import ADMIN_KEY, PgCluster

pytestmark = pytest.mark.slow  # separate server processes

FAILURES = 3


def _bad(i: int, forwarded: str) -> dict[str, str]:
    return {"Authorization": f"Bearer made-up-{i:04d}-xxxxxxxx", "X-Forwarded-For": forwarded}


async def _fresh_key(c: httpx.AsyncClient, api: str) -> str:
    made = await c.post(f"{api}/keys", json={"scopes": ["read"]}, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert made.status_code == 200, made.text
    token: str = made.json()["token"]
    return token


async def test_forwarded_for_is_read_from_a_trusted_peer_only(pg: PgCluster) -> None:
    with Fleet() as fleet:
        trusting, untrusting = await asyncio.gather(
            asyncio.to_thread(
                fleet.start,
                {
                    **fleet_env(pg.handle.url(pg.new_database()), CAIRN_AUTH_FAILURE_LIMIT=str(FAILURES)),
                    "FORWARDED_ALLOW_IPS": "127.0.0.1",
                },
            ),
            asyncio.to_thread(
                fleet.start,
                {
                    **fleet_env(pg.handle.url(pg.new_database()), CAIRN_AUTH_FAILURE_LIMIT=str(FAILURES)),
                    "FORWARDED_ALLOW_IPS": "192.0.2.1",
                },  # not the peer (127.0.0.1)
            ),
        )
        async with httpx.AsyncClient(timeout=30) as c:
            # The peer is trusted: 22 made-up keys from 22 forwarded clients are 22 clients.
            for i in range(22):
                r = await c.get(f"{trusting.api}/projects", headers=_bad(i, f"198.51.100.{i + 1}"))
                assert r.status_code == 401, r.text
            for i in range(FAILURES):  # one forwarded client goes past the limit...
                r = await c.get(f"{trusting.api}/projects", headers=_bad(100 + i, "203.0.113.9"))
                assert r.status_code == 401, r.text
            r = await c.get(f"{trusting.api}/projects", headers=_bad(200, "203.0.113.9"))
            assert r.status_code == 429 and r.json()["error"]["code"] == 4290, r.text
            # ...and a valid key this host never looked up still gets in from that client.
            fresh = await _fresh_key(c, trusting.api)
            ok = await c.get(
                f"{trusting.api}/projects",
                headers={"Authorization": f"Bearer {fresh}", "X-Forwarded-For": "203.0.113.9"},
            )
            assert ok.status_code == 200, ok.text

            # The peer is not trusted: the header is ignored, every failure counts against 127.0.0.1.
            codes = [
                (await c.get(f"{untrusting.api}/projects", headers=_bad(i, f"198.51.100.{i + 1}"))).status_code
                for i in range(FAILURES + 2)
            ]
            assert codes == [401] * FAILURES + [429] * 2, codes
            fresh = await _fresh_key(c, untrusting.api)
            mcp = await c.post(
                f"{untrusting.url}/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                headers={"Authorization": f"Bearer {fresh}", "Accept": "application/json, text/event-stream"},
            )
            assert mcp.status_code == 200, mcp.text  # a valid key is never refused by the limit
