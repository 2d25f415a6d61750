"""Issue 41, finding 3: an open server (no key yet) locks every process of its database the moment
its first key is created, with two real `cairn serve` hosts: of unauthenticated creations racing
across both hosts one succeeds, and once it has answered, every unauthenticated call on either host
(REST, MCP, the console, another key creation) is refused, with no wait."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.hosts import Fleet
from tests.support.server import PgCluster

pytestmark = pytest.mark.slow

RACERS = 16
MCP_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def test_the_first_key_locks_every_host_before_it_answers(pg: PgCluster) -> None:
    env = {"CAIRN_DATABASE_URL": pg.handle.url(pg.new_database()), "CAIRN_API_KEYS": ""}
    with Fleet() as fleet, httpx.Client(timeout=60) as client:
        hosts = [fleet.start(env), fleet.start(env)]
        for host in hosts:  # both open
            assert client.get(f"{host.api}/projects").status_code == 200, host.log()
        start = threading.Barrier(RACERS)

        def create(i: int) -> httpx.Response:
            start.wait(timeout=60)
            return client.post(f"{hosts[i % 2].api}/keys", json={"scopes": ["admin"], "name": f"racer-{i}"})

        with ThreadPoolExecutor(RACERS) as pool:
            answers = list(pool.map(create, range(RACERS)))
        made = [a for a in answers if a.status_code == 200]
        assert len(made) == 1, [(a.status_code, a.text[:200]) for a in answers]
        assert all(a.status_code == 401 for a in answers if a not in made), [a.text[:200] for a in answers]
        token = made[0].json()["token"]
        # Every host is locked now, on every transport (no waiting: the creation answered already).
        for host in hosts:
            assert client.get(f"{host.api}/projects").status_code == 401
            assert client.post(f"{host.api}/keys", json={"scopes": ["admin"]}).status_code == 401
            assert client.post(f"{host.url}/mcp", json=MCP_INIT, headers=MCP_HEADERS).status_code == 401
            console = client.get(f"{host.url}/ui/admin")
            assert console.status_code == 303 and console.headers["location"].startswith("/ui/login")
            signed = client.get(f"{host.api}/keys", headers={"Authorization": f"Bearer {token}"})
            assert signed.status_code == 200 and len(signed.json()["keys"]) == 1
