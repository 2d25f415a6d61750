"""A fleet through a PostgreSQL outage, and a fleet whose every key was revoked.

Two `cairn serve` hosts share a PostgreSQL cluster of this test's own (stopped and started here) and
know their callers by a stored key. While PostgreSQL is down, every call with that key is a 503 with
the shared error body (5030) and a `Retry-After`, on REST and on MCP (JSON and SSE answers alike),
never a plain-text 500 (the console shows its error page, 503); once it is back, both hosts serve
within 5 s and what was acknowledged before the stop is there. A database that has had a key stays
locked: with every key revoked, a restarted host still refuses unauthenticated calls and says in its
log how to create a key."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.core.pgembedded import EmbeddedPostgres, start_embedded
from tests.support.hosts import ROOT, Fleet, Host
from tests.support.waiting import eventually_sync

pytestmark = pytest.mark.slow

MCP_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


@pytest.fixture
def cluster() -> Iterator[EmbeddedPostgres]:
    """An embedded PostgreSQL of this test's own (the session's cluster must not go down)."""
    handle = start_embedded(Path(tempfile.mkdtemp(prefix="cairn-outage-")))
    try:
        yield handle
    finally:
        handle.stop()
        # A cluster restarted by pg_ctl is not the one the package started: it is left running by
        # `stop`, so it is stopped here (whatever state the test left it in).
        if (handle.pgdata / "postmaster.pid").exists():
            _pg_ctl(handle, "stop")
        shutil.rmtree(handle.pgdata.parent, ignore_errors=True)


def _pg_ctl(handle: EmbeddedPostgres, action: str) -> None:
    """`pg_ctl stop` (fast: sessions are cut) or `start` (same socket and port), as the user the
    package runs PostgreSQL as when we are root."""
    args = ["-m", "fast"] if action == "stop" else ["-o", f'-h "" -k {handle.socket_dir} -p {handle.port}']
    subprocess.run(
        [str(handle.bin("pg_ctl")), "-D", str(handle.pgdata), "-w", "-l", str(handle.pgdata / "log"), *args, action],
        check=True,
        capture_output=True,
        timeout=60,
        user=handle.server.system_user,
    )


def _cli(url: str, *args: str) -> str:
    """A `cairn` command on the database, as an operator runs it; its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    done = subprocess.run(
        [sys.executable, "-m", "app", *args],
        env={**env, "CAIRN_DATABASE_URL": url, "CAIRN_LOG_LEVEL": "WARNING"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _mcp(host: Host, key: str | None, accept: str) -> httpx.Response:
    headers = {"Accept": accept, **({"Authorization": f"Bearer {key}"} if key else {})}
    return httpx.post(f"{host.url}/mcp", json=MCP_LIST, headers=headers, timeout=30)


def _assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, (response.status_code, response.text[:300])
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == 5030 and "database" in error["message"].lower(), error
    assert int(response.headers["retry-after"]) > 0


def test_an_outage_is_a_503_and_the_fleet_serves_again_within_5_s(cluster: EmbeddedPostgres) -> None:
    url = cluster.url()
    key = _cli(url, "keys", "create", "--scopes", "read,write", "--name", "fleet").strip().splitlines()[-1]
    auth = {"Authorization": f"Bearer {key}"}
    env = {"CAIRN_DATABASE_URL": url, "CAIRN_API_KEYS": "", "CAIRN_KEY_CACHE_SECONDS": "0"}
    with Fleet() as fleet:
        a, b = fleet.start(env), fleet.start(env)
        for i, host in enumerate((a, b)):
            created = httpx.post(f"{host.api}/projects", json={"name": f"before-{i}"}, headers=auth, timeout=30)
            assert created.status_code == 200, created.text
        assert httpx.get(f"{a.api}/projects", timeout=30).status_code == 401  # keys are required

        _pg_ctl(cluster, "stop")
        for host in (a, b):
            _assert_unavailable(httpx.get(f"{host.api}/projects", headers=auth, timeout=30))
            _assert_unavailable(httpx.post(f"{host.api}/projects", json={"name": "lost"}, headers=auth, timeout=30))
            _assert_unavailable(_mcp(host, key, "application/json, text/event-stream"))  # the JSON answer
            _assert_unavailable(_mcp(host, key, "text/event-stream, application/json;q=0.9"))
            page = httpx.get(f"{host.url}/ui/", cookies={"cairn_key": key}, timeout=30)  # the console
            assert page.status_code == 503 and "5030" in page.text
            assert httpx.get(f"{host.url}/readyz", timeout=30).status_code == 503
            assert httpx.get(f"{host.url}/healthz", timeout=30).status_code == 200  # alive, not ready

        _pg_ctl(cluster, "start")
        started = time.monotonic()
        for host in (a, b):

            def serving(host: Host = host) -> bool:
                return httpx.get(f"{host.api}/projects", headers=auth, timeout=5).status_code == 200

            eventually_sync(
                serving,
                timeout=max(0.1, 5.0 - (time.monotonic() - started)),
                interval=0.1,
                what=f"host {host.port} serving again",
                errors=(httpx.HTTPError,),
            )
        back_after = time.monotonic() - started
        names = {p["name"] for p in httpx.get(f"{b.api}/projects", headers=auth, timeout=30).json()["projects"]}
        assert {"before-0", "before-1"} <= names and "lost" not in names
        reply = _mcp(a, key, "application/json, text/event-stream")
        assert reply.status_code == 200 and reply.json()["result"]["tools"]
        print(f"both hosts served again {back_after:.2f} s after PostgreSQL was started")


def test_a_database_that_had_a_key_stays_locked_after_every_key_is_revoked(cluster: EmbeddedPostgres) -> None:
    url = cluster.url()
    key = _cli(url, "keys", "create", "--scopes", "read", "--name", "only").strip().splitlines()[-1]
    env = {"CAIRN_DATABASE_URL": url, "CAIRN_API_KEYS": "", "CAIRN_KEY_CACHE_SECONDS": "0"}
    with Fleet() as fleet:
        a, b = fleet.start(env), fleet.start(env)
        _cli(url, "keys", "revoke", key[:12])
        assert httpx.get(f"{a.api}/projects", headers={"Authorization": f"Bearer {key}"}, timeout=30).status_code == 401
        b.stop()
        b.launch()
        b.wait_ready()
        for host in (a, b):
            refused = httpx.get(f"{host.api}/projects", timeout=30)
            assert refused.status_code == 401 and refused.json()["error"]["code"] == 4010
            assert refused.headers["www-authenticate"].startswith("Bearer")
            assert _mcp(host, None, "application/json, text/event-stream").status_code == 401
        assert "cairn keys create" in b.log() and "WITHOUT authentication" not in b.log()
