"""app/core/http/front.py and the limits behind it, without a server: JSON bodies and their nesting,
request ids, allowed hosts and origins, failed-authentication and event-stream limits."""

from __future__ import annotations

import time
from typing import Any

import pytest

from app.core.config import Settings
from app.core.errors import Forbidden, InvalidInput, RateLimited
from app.core.http.callers import Callers
from app.core.http.front import (
    MAX_JSON_DEPTH,
    HttpFront,
    _Patterns,
    allowed_hosts,
    allowed_origins,
    nests_deeper,
    parse_json_body,
    safe_request_id,
)
from app.core.ratelimit import FailureLimiter, StreamSlots


def test_json_bodies_parse_within_the_depth_cap() -> None:
    assert parse_json_body(b"") == {} and parse_json_body(b"  \n") == {}
    assert parse_json_body(b'{"a": [1, {"b": "[[{{"}]}') == {"a": [1, {"b": "[[{{"}]}
    at_cap = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert isinstance(parse_json_body(at_cap), list)
    for body in (b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), b"[" * 100_000, b'{"a":' * 5000):
        with pytest.raises(InvalidInput, match="nests deeper"):
            parse_json_body(body)


@pytest.mark.parametrize("body", [b"{", b'{"a": 1,}', b"\xff", b'{"a": "\xc3\x28"}', b"NaN?", b"\x00"])
def test_malformed_json_is_invalid_input(body: bytes) -> None:
    with pytest.raises(InvalidInput, match="not valid JSON"):
        parse_json_body(body)


def test_nesting_skips_strings_and_escaped_quotes() -> None:
    assert not nests_deeper(b'["' + b"[" * 500 + b'"]', 2)
    assert not nests_deeper(b'["\\"[[[[\\"", {"k": "]]]]"}]', 2)
    assert nests_deeper(b'[["\\\\"], [[[1]]]]', 3)
    assert not nests_deeper(b"[[], [], {}, []]", 2)


def test_request_ids_are_kept_only_when_safe() -> None:
    assert safe_request_id(b"trace-1.2:3_X") == "trace-1.2:3_X"
    assert safe_request_id(b"a" * 64) == "a" * 64
    for raw in (b"", b"a" * 65, b"a b", b"<x>", b"id\n", "é".encode(), b"x/y", None):
        rid = safe_request_id(raw)
        assert len(rid) == 16 and all(c in "0123456789abcdef" for c in rid), raw


def test_host_and_origin_patterns() -> None:
    hosts = _Patterns(["127.0.0.1:*", "localhost", "[::1]:*", "Cairn.Example.org"])
    assert hosts.allows("127.0.0.1:8000") and hosts.allows("localhost") and hosts.allows("[::1]:1")
    assert hosts.allows("cairn.example.org")
    for bad in ("127.0.0.1", "127.0.0.1:", "127.0.0.1:80.evil.example", "localhost:8000", "evil.example", ""):
        assert not hosts.allows(bad), bad


def test_public_url_and_settings_extend_the_allowed_lists() -> None:
    settings = Settings(
        database_url="x",
        public_url="https://Cairn.Example.org/",
        allowed_hosts=["proxy.internal:*"],
        allowed_origins=["https://console.example.org/"],
    )
    hosts = _Patterns(allowed_hosts(settings))
    assert hosts.allows("cairn.example.org") and hosts.allows("proxy.internal:9000")
    assert hosts.allows("localhost:8000") and not hosts.allows("evil.example")
    origins = _Patterns(allowed_origins(settings))
    assert origins.allows("https://cairn.example.org") and origins.allows("https://console.example.org")
    assert origins.allows("http://localhost:5173") and not origins.allows("https://evil.example")


def test_failure_limiter_locks_an_address_for_its_window(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    limiter = FailureLimiter(3, window=60)
    for _ in range(3):
        assert limiter.retry_after("10.0.0.1") is None
        limiter.record("10.0.0.1")
    assert limiter.retry_after("10.0.0.1") == 60 and limiter.retry_after("10.0.0.2") is None
    with pytest.raises(RateLimited) as caught:
        limiter.check("10.0.0.1")
    assert caught.value.headers["Retry-After"] == "60" and caught.value.code == 4290
    now[0] += 59.5
    assert limiter.retry_after("10.0.0.1") == 1
    now[0] += 1
    assert limiter.retry_after("10.0.0.1") is None
    assert FailureLimiter(0).retry_after("x") is None


def test_failure_limiter_table_stays_bounded() -> None:
    limiter = FailureLimiter(2, window=60, max_clients=100)
    for i in range(1000):
        limiter.record(f"10.0.{i // 256}.{i % 256}")
    assert len(limiter._failures) <= 100


def test_stream_slots_per_key() -> None:
    slots = StreamSlots(2)
    slots.acquire("a")
    slots.acquire("a")
    with pytest.raises(RateLimited):
        slots.acquire("a")
    slots.acquire("b")
    slots.release("a")
    slots.acquire("a")
    unlimited = StreamSlots(0)
    for _ in range(10):
        unlimited.acquire("a")


class _Guard:
    def __init__(self, locked: bool) -> None:
        self.known_locked = locked


def test_a_bare_multipart_upload_is_refused_only_while_no_key_is_required() -> None:
    """Without a header a cross-site form cannot add: 4030 on an open server, the route's own 4010
    once keys are required (from the start, or since an open server locked)."""
    headers = {b"host": b"127.0.0.1:8000", b"content-type": b"multipart/form-data; boundary=x"}
    settings = Settings(database_url="x")

    def refusal(callers: Callers, extra: dict[bytes, bytes] | None = None) -> Any:
        front = HttpFront(None, settings, multipart=frozenset({"/up"}), callers=callers)
        return front._refusal({"method": "POST"}, "/up", {**headers, **(extra or {})})

    assert isinstance(refusal(Callers(guard=_Guard(locked=False))), Forbidden)  # type: ignore[arg-type]
    assert refusal(Callers(guard=_Guard(locked=False)), {b"x-requested-with": b"curl"}) is None  # type: ignore[arg-type]
    assert refusal(Callers(guard=_Guard(locked=True))) is None  # type: ignore[arg-type]
    assert refusal(Callers(store=object())) is None  # type: ignore[arg-type]


def test_writes_from_another_origin_are_refused_on_an_open_server_and_the_console() -> None:
    """Another port of the same host is another origin: an open server and the console take writes
    only from their own pages (or from clients that are no browser)."""
    settings = Settings(database_url="x", public_url="https://cairn.example.org")
    host = {b"host": b"127.0.0.1:8101", b"content-type": b"application/json"}

    def refusal(callers: Any, path: str, extra: dict[bytes, bytes], method: str = "POST") -> Any:
        front = HttpFront(None, settings, callers=callers)
        return front._refusal({"method": method}, path, {**host, **extra})

    open_server, with_keys = Callers(guard=_Guard(locked=False)), Callers(store=object())  # type: ignore[arg-type]
    foreign = (
        {b"origin": b"http://127.0.0.1:8108"},
        {b"origin": b"http://localhost:3000"},
        {b"sec-fetch-site": b"same-site"},
        {b"sec-fetch-site": b"cross-site"},
    )
    for extra in foreign:
        for method in ("POST", "PUT", "DELETE"):
            refused = refusal(open_server, "/api/v1/datasets/upload", extra, method)
            assert isinstance(refused, Forbidden) and refused.code == 4030, (extra, method)
        assert isinstance(refusal(with_keys, "/ui/admin/keys/k/revoke", extra), Forbidden), extra
    own: tuple[dict[bytes, bytes], ...] = (
        {b"origin": b"http://127.0.0.1:8101"},
        {b"origin": b"https://cairn.example.org"},
        {},
    )
    for extra in (*own, {b"sec-fetch-site": b"same-origin"}):
        assert refusal(open_server, "/api/v1/projects", extra) is None, extra
    # Reads stay open to the allowed origins; a server with keys leaves REST writes to the bearer key.
    assert refusal(open_server, "/api/v1/projects", {b"origin": b"http://localhost:3000"}, "GET") is None
    assert refusal(with_keys, "/api/v1/projects", {b"origin": b"http://localhost:3000"}) is None
    assert refusal(Callers(guard=_Guard(locked=True)), "/api/v1/projects", foreign[0]) is None  # type: ignore[arg-type]
