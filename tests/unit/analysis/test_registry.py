"""app/analysis/registry.py (pure parts), without a server."""

from __future__ import annotations

import pytest

from app.analysis.config import DEMO_REGISTRY
from app.analysis.registry import load_registry, parse_registry
from app.core.errors import SchemaError


def test_registry_validation() -> None:
    with pytest.raises(SchemaError, match="must contain"):
        parse_registry(
            "upstreams: {u: {base_url: 'http://x', models: {m: {list_path: /m, writable: true, "
            "update: {method: PATCH, path: /m}}}}}"
        )
    with pytest.raises(SchemaError, match="declared by both"):
        parse_registry(
            "upstreams: {a: {base_url: 'http://x', models: {m: {list_path: /m}}}, "
            "b: {base_url: 'http://y', models: {m: {list_path: /m}}}}"
        )
    with pytest.raises(SchemaError, match="not valid YAML"):
        parse_registry("upstreams: [")
    with pytest.raises(SchemaError, match="colour"):
        parse_registry("upstreams: {a: {base_url: 'http://x', colour: red, models: {}}}")
    reg = load_registry(DEMO_REGISTRY)
    assert reg.child_model_name("book", "sessions") == "reading_session"
    assert "device" in reg.attributes_of("reading_session")
