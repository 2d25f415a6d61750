"""app/core/embeddings/providers.py: the configured provider, and the settings each one refuses."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.embeddings.providers import build_embedder
from app.core.embeddings.remote import OllamaEmbedder, OpenAIEmbedder


def test_build_embedder() -> None:
    local = build_embedder("local", model="sentence-transformers/all-MiniLM-L6-v2", dimension=384)
    assert isinstance(local, LocalOnnxEmbedder) and (local.provider, local.dimension) == ("local", 384)
    openai = build_embedder("openai", model="text-embedding-3-small", api_key="k")
    assert isinstance(openai, OpenAIEmbedder) and openai.dimension == 1536
    ollama = build_embedder("ollama", model="some-model", dimension=12)
    assert isinstance(ollama, OllamaEmbedder) and ollama.dimension == 12
    bad: list[tuple[str, dict[str, Any]]] = [
        ("nope", {}),
        ("local", {"model": "other-model"}),
        ("local", {"dimension": 768}),
        ("ollama", {"model": "unknown-model"}),
    ]
    for provider, kwargs in bad:
        with pytest.raises(ValueError):
            build_embedder(provider, **kwargs)
