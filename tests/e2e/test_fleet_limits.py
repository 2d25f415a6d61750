"""Per-key limits across a fleet: two `cairn serve` hosts (separate processes) on one database hold one
key's call rate, its long-job slots and an address's failed-authentication lockout as one host does."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from tests.support.hosts import Fleet, Host
from tests.support.server import ADMIN_KEY, READ_KEY, STATIC_KEYS, WRITE_KEY, PgCluster
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow  # separate server processes

RATE, BURST = 20, 40
HAMMER_SECONDS = 3.0


def fleet_env(url: str, **extra: str) -> dict[str, str]:
    """Hosts on one database with small limits (no feature family: the core's calls suffice)."""
    return {
        "CAIRN_DATABASE_URL": url,
        "CAIRN_API_KEYS": ",".join(STATIC_KEYS),
        "CAIRN_FEATURES": "",
        "CAIRN_RATE_LIMIT_PER_SECOND": str(RATE),
        "CAIRN_RATE_LIMIT_BURST": str(BURST),
        **extra,
    }


async def start_two(fleet: Fleet, env: dict[str, str], **kwargs: object) -> tuple[Host, Host]:
    """Two hosts, started side by side."""
    a, b = await asyncio.gather(*(asyncio.to_thread(fleet.start, env, **kwargs) for _ in range(2)))
    return a, b


async def hammer(hosts: list[Host], key: str, seconds: float, per_host: int = 3) -> dict[int, int]:
    """Call `list_projects` as fast as `per_host` clients per host can for `seconds`; the count of
    each status code."""
    codes: dict[int, int] = {}
    deadline = time.monotonic() + seconds

    async def client(host: Host) -> None:
        async with httpx.AsyncClient(base_url=host.api, headers={"Authorization": f"Bearer {key}"}) as c:
            while time.monotonic() < deadline:
                status = (await c.get("/projects")).status_code
                codes[status] = codes.get(status, 0) + 1

    await asyncio.gather(*(client(host) for host in hosts for _ in range(per_host)))
    return codes


async def test_one_keys_rate_holds_across_hosts(pg: PgCluster) -> None:
    with Fleet() as fleet:
        a, b = await start_two(fleet, fleet_env(pg.handle.url(pg.new_database())))
        # Side by side in one run: one key on one host, then another key on both hosts, as long.
        alone = await hammer([a], READ_KEY, HAMMER_SECONDS)
        both = await hammer([a, b], WRITE_KEY, HAMMER_SECONDS)
    one_host, two_hosts = alone.get(200, 0), both.get(200, 0)
    assert set(alone) <= {200, 429} and set(both) <= {200, 429}, (alone, both)
    assert alone.get(429, 0) > 0 and both.get(429, 0) > 0, (alone, both)  # both runs went past the limit
    bound = BURST + RATE * HAMMER_SECONDS  # what a token bucket allows in the interval
    # One host alone gets close to the whole bucket (the leases lose little)...
    assert one_host >= 0.75 * bound, (alone, bound)
    # ...and two hosts together no more than one allows (within 1.25x), not twice as much.
    assert two_hosts <= 1.25 * max(one_host, bound), (alone, both)


async def test_long_job_and_stream_slots_and_auth_lockouts_hold_across_hosts(pg: PgCluster, tmp_path: Path) -> None:
    env = fleet_env(
        pg.handle.url(pg.new_database()),
        CAIRN_MAX_LONG_JOBS_PER_KEY="1",
        CAIRN_MAX_SSE_STREAMS_PER_KEY="1",
        CAIRN_AUTH_FAILURE_LIMIT="3",
        CAIRN_RATE_LIMIT_PER_SECOND="1000",
        CAIRN_RATE_LIMIT_BURST="1000",
    )
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with Fleet() as fleet:
        a, b = await start_two(fleet, env, module="tests.support.instrumentation")
        async with httpx.AsyncClient(timeout=60, headers=auth) as c:
            started, release = tmp_path / "started", tmp_path / "release"
            held = {"steps": 1, "delay_ms": 0, "started": str(started), "release": str(release)}
            running = asyncio.create_task(c.post(f"{a.api}/testing/progress", json=held))
            await eventually(started.exists, what="the long job running on host A")
            refused = await c.post(f"{b.api}/testing/progress", json={"steps": 1, "delay_ms": 0})
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == 4290 and int(refused.headers["retry-after"]) >= 1
            release.touch()
            assert (await running).status_code == 200
            # A's slot was given back before its answer: B runs one at once.
            after = await c.post(f"{b.api}/testing/progress", json={"steps": 1, "delay_ms": 0})
            assert after.status_code == 200, after.text

            sse = {**auth, "Accept": "text/event-stream"}
            async with c.stream("GET", f"{a.url}/mcp", headers=sse) as held_stream:
                assert held_stream.status_code == 200
                second = await c.get(f"{b.url}/mcp", headers=sse, timeout=10)  # refused at once, not a stream
                assert second.status_code == 429 and second.json()["error"]["code"] == 4290, second.text

        async with httpx.AsyncClient(timeout=30) as c:
            for i in range(3):  # three unknown keys from this address, all on host A
                r = await c.get(f"{a.api}/projects", headers={"Authorization": f"Bearer made-up-{i:04d}-xxxxxxxx"})
                assert r.status_code == 401, r.text
            locked = await c.get(f"{b.api}/projects", headers={"Authorization": "Bearer made-up-on-b-xxxxxxxx"})
            assert locked.status_code == 429 and locked.json()["error"]["code"] == 4290, locked.text
            assert 1 <= int(locked.headers["retry-after"]) <= 60
            valid = await c.get(f"{b.api}/projects", headers=auth)  # a static key is never refused
            assert valid.status_code == 200, valid.text
