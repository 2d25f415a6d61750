"""app/analysis/upstream.py: which URLs stay under an upstream's base URL, and the bounded decoder."""

from __future__ import annotations

import gzip
import zlib

import pytest

from app.analysis.upstream import UpstreamFailure, _Inflater, within_base

BASE = "https://api.example.com:8443/v1"


@pytest.mark.parametrize(
    ("url", "resolved"),
    [
        ("https://api.example.com:8443/v1", "https://api.example.com:8443/v1"),
        ("https://api.example.com:8443/v1/books?page=2", "https://api.example.com:8443/v1/books?page=2"),
        ("https://API.example.com:8443/v1/a/../books#top", "https://API.example.com:8443/v1/books"),
        ("https://api.example.com:8443/v1/./a/%2e/b/..", "https://api.example.com:8443/v1/a/"),
        ("https://api.example.com:8443/v1/books/%2e%2E/authors", "https://api.example.com:8443/v1/authors"),
    ],
)
def test_urls_under_the_base_are_normalised(url: str, resolved: str) -> None:
    assert within_base(BASE, url) == resolved


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com:8443/v1/../admin",
        "https://api.example.com:8443/v1/%2e%2e/admin",
        "https://api.example.com:8443/v1/books/../../admin",
        "https://api.example.com:8443/v1x/books",
        "https://api.example.com:8443/",
        "https://api.example.com:8443/v1/..%2fadmin",
        "https://api.example.com:8443/v1/books%2F..%2F..%2Fadmin",
        "https://api.example.com:8443/v1\\..\\admin",
        "http://api.example.com:8443/v1/books",
        "https://api.example.com/v1/books",
        "https://api.example.com:9443/v1/books",
        "https://evil.example.com:8443/v1/books",
        "https://api.example.com.evil.net:8443/v1/books",
        "https://user:pw@api.example.com:8443/v1/books",
        "https://api.example.com:99999/v1/books",
        "ftp://api.example.com:8443/v1/books",
    ],
)
def test_urls_leaving_the_base_are_refused(url: str) -> None:
    assert within_base(BASE, url) is None


def test_default_ports_and_a_base_without_a_path() -> None:
    assert within_base("https://h.example/api", "https://h.example:443/api/x") == "https://h.example:443/api/x"
    assert within_base("http://h.example", "http://h.example/../anything") == "http://h.example/anything"
    assert within_base("http://h.example", "http://h.example:8080/x") is None


def test_the_inflater_never_makes_more_than_the_room_it_is_given() -> None:
    bomb = gzip.compress(b"\0" * 20_000_000)
    inflater = _Inflater("gzip", "u")
    out = inflater.decode(bomb, 1000)
    assert len(out) == 1001  # one more than fits: the caller stops there
    plain = b'{"data": [1, 2, 3]}'
    assert _Inflater("identity", "u").decode(plain, 5) == plain  # not encoded: the caller counts
    assert _Inflater("deflate", "u").decode(zlib.compress(plain), 100) == plain
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert _Inflater("deflate", "u").decode(raw.compress(plain) + raw.flush(), 100) == plain
    with pytest.raises(UpstreamFailure, match="not supported"):
        _Inflater("br", "u")
    with pytest.raises(UpstreamFailure, match="malformed gzip"):
        _Inflater("gzip", "u").decode(b"not gzip at all", 100)
