"""app/core/http/callers.py: who is calling, without a server: bearer headers, the three ways a server
knows its callers (keys, open, local), the 4010 challenges, the failed-authentication lockout, the
open server that locks once a key exists, and a key cache that made-up keys cannot flush."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from app.core import migrations
from app.core.auth import StaticKey, hash_key
from app.core.config import Settings
from app.core.context import OPEN_PRINCIPAL, Principal
from app.core.db import Database
from app.core.errors import RateLimited, Unauthenticated, Unavailable
from app.core.fleet_limits import FleetFailures
from app.core.http import callers as callers_module
from app.core.http.callers import (
    CALLER_STATE,
    CairnTokenVerifier,
    Callers,
    KeyStore,
    OpenModeGuard,
    bearer_token,
    client_address,
    keys_exist,
    mcp_caller,
    resolve_caller,
    scope_bearer,
    starts_open,
)
from app.core.keyusage import KeyUsage
from app.core.ratelimit import FailureLimiter
from tests.support.server import PgCluster

STATIC = "static-key-0123456789"
META = "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp"


K1 = uuid.UUID("00000000-0000-0000-0000-0000000000a1")


class _Row:
    id, name, scopes, project, toolsets = K1, "ok", ["read"], None, None


class _Keys:
    """Stands in for the key table: `good-key` is the one stored key; counts the lookups."""

    lookups = 0
    checks = 0  # keys_required calls
    reads = 0  # of the valid keys' hashes
    valid: tuple[str, ...] = ("good-key",)
    active = 0
    locked_db = False
    down = False  # PostgreSQL refuses connections

    def __init__(self, session: Any) -> None:
        pass

    async def by_hash(self, digest: str) -> _Row | None:
        if type(self).down:
            raise ConnectionRefusedError(111, "Connect call failed")
        type(self).lookups += 1
        return _Row() if digest in {hash_key(t) for t in type(self).valid} else None

    async def active_hashes(self) -> list[str]:
        type(self).reads += 1
        return [hash_key(t) for t in type(self).valid]

    async def count_active(self) -> int:
        if type(self).down:
            raise ConnectionRefusedError(111, "Connect call failed")
        return type(self).active

    async def locked(self) -> bool:
        return type(self).locked_db

    async def lock(self, reason: str) -> None:
        type(self).locked_db = True

    async def keys_required(self) -> bool:
        type(self).checks += 1
        return await self.count_active() > 0 or type(self).locked_db


class _Db:
    async def run(self, fn: Any) -> Any:
        return await fn(None)

    def transaction(self) -> Any:
        db = self

        class _Tx:
            async def __aenter__(self) -> Any:
                return db

            async def __aexit__(self, *exc: object) -> None:
                return None

        return _Tx()


@pytest.fixture(autouse=True)
def _key_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(callers_module, "ApiKeyRepository", _Keys)
    monkeypatch.setattr(_Keys, "lookups", 0)
    monkeypatch.setattr(_Keys, "checks", 0)
    monkeypatch.setattr(_Keys, "reads", 0)
    monkeypatch.setattr(_Keys, "valid", ("good-key",))
    monkeypatch.setattr(_Keys, "active", 0)
    monkeypatch.setattr(_Keys, "locked_db", False)
    monkeypatch.setattr(_Keys, "down", False)


def _store(failures: FailureLimiter | None = None, static: list[StaticKey] | None = None) -> KeyStore:
    return KeyStore(_Db(), static or [], cache_seconds=60, failures=failures)  # type: ignore[arg-type]


def test_bearer_tokens_are_read_from_the_header() -> None:
    assert bearer_token("Bearer abc") == "abc" and bearer_token("bearer  abc ") == "abc"
    assert bearer_token("Basic abc") == "" and bearer_token("") == "" and bearer_token("Bearer ") == ""
    assert scope_bearer({"headers": [(b"accept", b"*/*"), (b"authorization", b"BEARER k")]}) == "k"
    assert scope_bearer({"headers": []}) == "" and scope_bearer({}) == ""


async def test_a_server_with_keys_requires_a_valid_one_with_a_challenge() -> None:
    keys = Callers(store=_store(static=[StaticKey(STATIC, frozenset({"write"}), "p1")]), metadata_url=META)
    with pytest.raises(Unauthenticated, match="is required") as missing:
        await resolve_caller(keys, "")
    assert missing.value.headers == {"WWW-Authenticate": f'Bearer resource_metadata="{META}"'}
    with pytest.raises(Unauthenticated, match="unknown or revoked") as unknown:
        await resolve_caller(keys, "made-up")
    assert unknown.value.headers["WWW-Authenticate"] == f'Bearer error="invalid_token", resource_metadata="{META}"'
    static = await resolve_caller(keys, STATIC)
    assert static.project == "p1" and static.has_scope("write") and not static.has_scope("admin")
    stored = await resolve_caller(keys, "good-key")
    assert stored.key_id == str(K1) and await keys.keys_required() and keys.keys_known_required
    assert await keys.ahead_of_sdk("") is None  # the SDK's verifier resolves callers of such a server


async def test_an_open_server_serves_everyone_until_a_key_exists() -> None:
    guard = OpenModeGuard(_store())
    open_server = Callers(guard=guard)
    assert await resolve_caller(open_server, "") == OPEN_PRINCIPAL
    assert await resolve_caller(open_server, "anything") == OPEN_PRINCIPAL
    assert not open_server.keys_known_required and await open_server.ahead_of_sdk("") == OPEN_PRINCIPAL
    _Keys.active = 1  # a key was created
    with pytest.raises(Unauthenticated) as missing:
        await resolve_caller(open_server, "")
    assert missing.value.headers == {"WWW-Authenticate": "Bearer"}  # no metadata served here
    assert (await resolve_caller(open_server, "good-key")).key_id == str(K1)
    assert open_server.keys_known_required
    _Keys.active = 0
    assert await guard.locked()  # once locked, stays locked


async def test_the_guard_reads_the_database_on_every_check_while_open() -> None:
    guard = OpenModeGuard(_store())
    assert not await guard.locked() and not await guard.locked()
    _Keys.active = 1  # a key created by another process: the very next check sees it
    assert await guard.locked() and guard.known_locked
    assert _Keys.checks == 3
    _Keys.active = 0
    assert await guard.locked() and _Keys.checks == 3  # locked for good, no more lookups


async def test_a_local_session_is_the_user_who_started_it() -> None:
    local = Callers()
    assert await resolve_caller(local, "") == OPEN_PRINCIPAL
    assert not await local.keys_required()
    assert await mcp_caller(local, None) == OPEN_PRINCIPAL


async def test_mcp_callers_come_from_the_request_state() -> None:
    keys = Callers(store=_store(), metadata_url=META)
    with pytest.raises(Unauthenticated):
        await mcp_caller(keys, None)
    someone = Principal(key_id="k9", name="n", scopes=frozenset({"read"}))

    class _Request:
        scope = {"state": {CALLER_STATE: someone}}

    assert await mcp_caller(Callers(guard=OpenModeGuard(_store())), _Request()) == someone
    verified = await CairnTokenVerifier(keys).verify_token("good-key")
    assert verified is not None and verified.scopes == ["read"] and verified.client_id == str(K1)
    assert await CairnTokenVerifier(keys).verify_token("made-up") is None


async def test_a_locked_out_address_is_refused_before_any_lookup() -> None:
    failures = FailureLimiter(2)
    keys = Callers(store=_store(failures, [StaticKey(STATIC, frozenset({"admin"}), None)]), metadata_url=META)
    token = client_address.set("10.9.9.9")
    try:
        for i in range(2):
            with pytest.raises(Unauthenticated):
                await resolve_caller(keys, f"made-up-{i}")
        assert await keys.refusal("made-up-2", "10.9.9.9") is not None
        assert await keys.refusal(STATIC, "10.9.9.9") is None and await keys.refusal("made-up-2", "10.0.0.1") is None
        with pytest.raises(RateLimited):
            await resolve_caller(keys, "made-up-2")
        assert _Keys.lookups == 2
        assert (await resolve_caller(keys, STATIC)).has_scope("admin")
    finally:
        client_address.reset(token)
    assert await Callers(guard=OpenModeGuard(_store(failures))).refusal("x", "10.9.9.9") is None  # checked on lookup


async def test_a_lockout_holds_across_the_key_stores_of_two_processes(pg: PgCluster) -> None:
    """Two processes' key stores on one database: the failures one records lock the address out of the
    other's lookups, which then knows it without the database."""
    url = pg.handle.url(pg.new_database())
    await migrations.upgrade_async(url, [])
    dbs = [Database(url, Settings()) for _ in range(2)]
    static = [StaticKey(STATIC, frozenset({"read"}), None)]
    a, b = (KeyStore(db, static, cache_seconds=60, failures=FleetFailures(2, db)) for db in dbs)
    token = client_address.set("10.7.7.7")
    try:
        for i in range(2):
            assert await a.verify(f"made-up-{i}") is None
        assert await Callers(store=b).refusal("made-up-b", "10.7.7.7") is None  # b has not looked anything up yet
        with pytest.raises(RateLimited):
            await b.verify("made-up-b")  # its lookup reads the lockout a recorded
        assert await Callers(store=b).refusal("made-up-c", "10.7.7.7") is not None
        assert await b.verify(STATIC) is not None  # a static key is never refused
        client_address.set("10.8.8.8")
        assert await b.verify("made-up-elsewhere") is None  # another address may still try
    finally:
        client_address.reset(token)
        for db in dbs:
            await db.dispose()


async def test_a_valid_key_not_yet_cached_passes_a_lockout_and_made_up_ones_cost_few_reads() -> None:
    """Issue 41 #9: a locked-out address (a proxy's, or one shared by many clients) still gets in with
    a valid stored key the process had never seen; made-up keys meanwhile cost one read of the valid
    keys' hashes per `VALID_REFRESH_SECONDS`, not a lookup each."""
    store = _store(FailureLimiter(2))
    token = client_address.set("10.3.3.3")
    try:
        for i in range(2):
            assert await store.verify(f"made-up-{i}") is None
        assert _Keys.lookups == 2
        started = time.monotonic()
        flood = await asyncio.gather(*(store.verify(f"made-up-more-{i}") for i in range(20)), return_exceptions=True)
        assert all(isinstance(e, RateLimited) for e in flood)
        # The requests that wait share a read (the first ran alone: this fake database never yields).
        assert _Keys.lookups == 2 and _Keys.reads == 2
        good = await store.verify("good-key")  # not cached: its hash is among the valid keys' read
        assert good is not None and good.key_id == str(K1) and _Keys.lookups == 3 and _Keys.reads == 2
        _Keys.valid = ("good-key", "new-key")  # a key created after the last read
        assert await store.verify("new-key") is not None and _Keys.reads == 3
        assert time.monotonic() - started >= callers_module.VALID_REFRESH_SECONDS
        assert await store.refusal("good-key") is None and await store.refusal("made-up-x") is not None
    finally:
        client_address.reset(token)


def test_only_a_loopback_server_starts_without_keys() -> None:
    assert not starts_open(Settings(database_url="x", host="0.0.0.0"), has_keys=True)
    assert starts_open(Settings(database_url="x", host="127.0.0.1"), has_keys=False)
    with pytest.raises(RuntimeError, match=r"Refusing to serve on 0\.0\.0\.0 without API keys"):
        starts_open(Settings(database_url="x", host="0.0.0.0"), has_keys=False)


async def test_made_up_keys_neither_flush_valid_ones_nor_escape_the_limit() -> None:
    store = _store(FailureLimiter(5))
    token = client_address.set("10.1.1.1")
    try:
        good = await store.verify("good-key")
        assert good is not None and good.key_id == str(K1)
        for i in range(4):
            assert await store.verify(f"made-up-{i}") is None
        assert await store.verify("made-up-0") is None  # the negative cache answers (a 5th failure)
        assert _Keys.lookups == 5
        with pytest.raises(RateLimited):
            await store.verify("made-up-more")  # locked out before any lookup
        assert _Keys.lookups == 5
        assert await store.verify("good-key") == good  # cached: neither looked up nor refused
        assert await store.refusal("made-up-more") is not None and await store.refusal("good-key") is None
    finally:
        client_address.reset(token)
    token = client_address.set("10.2.2.2")  # another address is not locked out
    try:
        assert await store.verify("made-up-more") is None
        store._unknown.update({f"h{i}": time.monotonic() for i in range(20_000)})
        assert await store.verify("flood") is None  # the negative cache overflows and is cleared...
        assert store._cached(hash_key("good-key"), time.monotonic()) == good  # ...not the valid keys
    finally:
        client_address.reset(token)


async def test_a_key_lookup_writes_nothing_and_notes_the_use_in_memory() -> None:
    usage = KeyUsage(_Db(), interval=3600)  # type: ignore[arg-type]
    store = KeyStore(_Db(), [], cache_seconds=60.0, usage=usage)  # type: ignore[arg-type]
    assert await store.verify("good-key") is not None  # looked up: only `by_hash` reaches the key table
    first = usage._pending[K1]
    assert await store.verify("good-key") is not None  # cached: noted again, later
    assert usage.pending == 1 and usage._pending[K1] >= first and _Keys.lookups == 1
    assert await store.verify("unknown-key") is None and usage.pending == 1
    assert Callers.build(_Db(), Settings(api_keys=[STATIC]), open_mode=False).usage is not None  # type: ignore[arg-type]
    assert Callers.build(_Db(), Settings(), open_mode=True).usage is not None  # type: ignore[arg-type]
    assert Callers.build(_Db(), Settings(), open_mode=False, local=True).usage is None  # type: ignore[arg-type]


async def test_an_outage_is_a_5030_on_every_path_that_looks_a_key_up() -> None:
    _Keys.down = True
    keys = Callers(store=_store(static=[StaticKey(STATIC, frozenset({"read"}), None)]), metadata_url=META)
    with pytest.raises(Unavailable) as lookup:
        await resolve_caller(keys, "good-key")
    assert lookup.value.code == 5030 and lookup.value.status == 503
    assert lookup.value.headers == {"Retry-After": "2"}
    assert (await resolve_caller(keys, STATIC)).name == "static"  # a static key needs no database
    with pytest.raises(Unavailable):
        await keys.ahead_of_sdk("good-key")  # the MCP endpoint answers it before the SDK would say 401
    open_server = Callers(guard=OpenModeGuard(_store()))
    with pytest.raises(Unavailable):
        await resolve_caller(open_server, "")  # an open server does not serve while it cannot tell
    with pytest.raises(Unavailable):
        await open_server.keys_required()
    with pytest.raises(Unavailable):
        await _keys_exist([])
    _Keys.down = False
    assert (await resolve_caller(keys, "good-key")).key_id == str(K1)  # back: served again


async def test_the_sdk_verifier_reuses_the_endpoints_lookup() -> None:
    keys = Callers(store=_store(), metadata_url=META)
    assert await keys.ahead_of_sdk("good-key") is None and _Keys.lookups == 1
    verified = await CairnTokenVerifier(keys).verify_token("good-key")
    assert verified is not None and verified.client_id == str(K1)
    assert await keys.ahead_of_sdk("made-up") is None and _Keys.lookups == 2
    assert await CairnTokenVerifier(keys).verify_token("made-up") is None
    assert _Keys.lookups == 2  # neither was looked up twice


async def _keys_exist(static: list[StaticKey]) -> bool:
    return await keys_exist(_Db(), static)  # type: ignore[arg-type]


def _locked() -> bool:
    return _Keys.locked_db


async def test_a_database_that_had_a_key_stays_locked() -> None:
    assert not await _keys_exist([]) and not _locked()
    _Keys.active = 1
    assert await _keys_exist([]) and _locked()
    _Keys.active = 0  # every key revoked
    assert await _keys_exist([])
    assert not starts_open(Settings(database_url="x", host="127.0.0.1"), has_keys=True)
    guard = OpenModeGuard(_store())
    assert await guard.locked()  # an open server of it would lock at once


async def test_static_keys_lock_the_database_too() -> None:
    static = [StaticKey(STATIC, frozenset({"admin"}), None)]
    assert await _keys_exist(static) and _locked()
    assert await _keys_exist([])
