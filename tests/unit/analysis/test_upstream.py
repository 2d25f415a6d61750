"""app/analysis/upstream.py (pure parts), without a server."""

from __future__ import annotations

import json

from app.analysis.repository import _json
from app.analysis.upstream import retry_after_seconds


def test_retry_after_and_nul_bytes() -> None:
    assert retry_after_seconds("3") == 3.0 and retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    assert 0 <= (retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") or 0) <= 1
    assert json.loads(_json({"a": "x\x00y", "b": "\\u0000"})) == {"a": "xy", "b": "\\u0000"}
