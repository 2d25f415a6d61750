"""app/core/auth.py: the key's form and hash, scope lists, the static keys of `CAIRN_API_KEYS`, and a
created key stored by its hash alone on a migrated database of its own."""

from __future__ import annotations

import hashlib
import uuid

import pytest

from app.core import auth
from app.core.db import Database
from app.core.errors import InvalidInput
from app.core.models import ApiKey
from app.core.repository import ApiKeyRepository
from tests.support.databases import database_fixture

db = database_fixture([])


def test_keys_are_fresh_prefixed_and_hashed_with_sha256() -> None:
    first, second = auth.new_key(), auth.new_key()
    assert first.startswith(auth.KEY_PREFIX) and first != second and len(first) > 40
    assert auth.hash_key(first) == hashlib.sha256(first.encode()).hexdigest()
    assert auth.hash_key(first) != auth.hash_key(second)
    ids = {auth.request_id() for _ in range(50)}
    assert len(ids) == 50 and all(len(i) == 16 for i in ids)


def test_scopes_are_validated_and_put_in_their_order() -> None:
    assert auth.parse_scopes("admin,read") == ["read", "admin"]
    assert auth.parse_scopes("write+read") == ["read", "write"]
    assert auth.parse_scopes([" admin ", "admin", ""]) == ["admin"]
    with pytest.raises(InvalidInput, match="owner") as bad:
        auth.parse_scopes("read,owner")
    assert bad.value.code == 4001
    with pytest.raises(InvalidInput, match="allowed: read, write, admin"):
        auth.parse_scopes(" , ")


def test_static_keys_read_scopes_project_and_toolsets() -> None:
    plain, scoped, bound, listed = auth.parse_static_keys(
        [
            "a" * 16,
            "b" * 16 + ":read+write",
            "c" * 16 + ":read:team",
            "d" * 16 + "::team:memory+graph",
        ]
    )
    assert plain == auth.StaticKey(token="a" * 16, scopes=frozenset({"admin"}), project=None, toolsets=None)
    assert scoped.scopes == frozenset({"read", "write"}) and scoped.project is None
    assert (bound.scopes, bound.project) == (frozenset({"read"}), "team")
    assert listed.scopes == frozenset({"admin"}) and listed.toolsets == ("memory", "graph")
    with pytest.raises(InvalidInput, match="at least 16 characters"):
        auth.parse_static_keys(["short:read"])
    with pytest.raises(InvalidInput, match="invalid scopes"):
        auth.parse_static_keys(["e" * 16 + ":root"])
    with pytest.raises(InvalidInput, match="invalid toolset names"):
        auth.parse_static_keys(["f" * 16 + ":read::9lives"])


async def test_a_created_key_is_stored_by_its_hash(db: Database) -> None:
    key_id, token = await auth.create_key(db, scopes=["write", "read"], project="team", name="ci", toolsets=["memory"])
    async with db.transaction() as session:
        stored = await session.get(ApiKey, uuid.UUID(key_id))
        assert stored is not None
        assert (stored.name, stored.prefix, stored.project) == ("ci", token[:12], "team")
        assert stored.scopes == ["read", "write"] and stored.toolsets == ["memory"]
        assert stored.key_hash == auth.hash_key(token) and token not in str(vars(stored))
        found = await ApiKeyRepository(session).by_hash(auth.hash_key(token))
        assert found is not None and str(found.id) == key_id
    with pytest.raises(InvalidInput):
        await auth.create_key(db, scopes=["superuser"], project=None)
    async with db.transaction() as session:
        assert await ApiKeyRepository(session).count_active() == 1  # the refused key left no row


def test_a_key_may_be_bound_only_to_a_usable_project_name() -> None:
    assert auth.bound_project(None) is None and auth.bound_project("") is None
    assert auth.bound_project("team-notes.v2") == "team-notes.v2"
    for bad in ("../x", "a/b", ".hidden", "x" * 129, "sp ace"):
        with pytest.raises(InvalidInput, match="invalid project"):
            auth.bound_project(bad)
    [key] = auth.parse_static_keys(["k" * 16 + ":read:team"])
    assert key.project == "team" and key.scopes == frozenset({"read"})
    with pytest.raises(InvalidInput, match="invalid project"):
        auth.parse_static_keys(["k" * 16 + ":read:../up"])


async def test_a_shared_secret_is_made_once_for_every_host(db: Database) -> None:
    first = await auth.shared_secret(db, "test-shared")
    assert len(first) >= 40 and await auth.shared_secret(db, "test-shared") == first  # another host reads it
    assert await auth.shared_secret(db, "test-other") != first
