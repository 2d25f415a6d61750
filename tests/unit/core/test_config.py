"""app/core/config.py: list settings from flat environment variables, the loopback test, and the hosts,
origins and resource URL the MCP endpoint derives from the bind address."""

from __future__ import annotations

import pytest

from app.core.config import Settings, get_settings


def test_list_settings_read_comma_separated_environment_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_API_KEYS", " k1:read , k2:admin,, ")
    monkeypatch.setenv("CAIRN_FEATURES", "memory,graph")
    monkeypatch.setenv("CAIRN_ALLOWED_HOSTS", "cairn.example:*")
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.api_keys == ["k1:read", "k2:admin"]
    assert settings.features == ["memory", "graph"]
    assert settings.allowed_hosts == ["cairn.example:*"]
    assert Settings(api_keys=["a:read"], _env_file=None).api_keys == ["a:read"]  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("192.168.1.5", False),
        ("cairn.internal", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert Settings(host=host).is_loopback() is loopback


def test_the_resource_url_is_the_public_url_when_set() -> None:
    assert Settings(host="127.0.0.1", port=8123).resource_url() == "http://127.0.0.1:8123/mcp"
    assert Settings(public_url="https://cairn.example/").resource_url() == "https://cairn.example/mcp"


def test_allowed_hosts_add_the_bound_name_unless_loopback_or_every_address() -> None:
    local = ["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost"]
    assert Settings(host="127.0.0.1").effective_allowed_hosts() == local
    assert Settings(host="0.0.0.0").effective_allowed_hosts() == local
    named = Settings(host="cairn.internal", allowed_hosts=["proxy.example"]).effective_allowed_hosts()
    assert named == [*local, "cairn.internal", "cairn.internal:*", "proxy.example"]


def test_allowed_origins_are_the_loopback_ones_and_the_listed() -> None:
    extra = Settings(allowed_origins=["https://app.example"]).effective_allowed_origins()
    assert extra == ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*", "https://app.example"]


def test_get_settings_reads_once() -> None:
    assert get_settings() is get_settings()


def test_session_bound_work_connects_to_the_direct_url_when_one_is_configured() -> None:
    pooled = "postgresql+asyncpg://c@pgbouncer:6432/cairn"
    direct = "postgresql+asyncpg://c@db:5432/cairn"
    assert Settings(database_url=pooled, database_direct_url=direct).direct_url(pooled) == direct
    assert Settings(database_url=pooled).direct_url(pooled) == pooled
    embedded = "postgresql+asyncpg://postgres@/cairn?host=/tmp/s"
    assert Settings(database_direct_url=direct).direct_url(embedded) == embedded  # no configured database
