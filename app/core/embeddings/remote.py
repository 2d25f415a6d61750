"""Embedding services over HTTP: any OpenAI-compatible embeddings API, and Ollama.

Texts go in requests of at most `REMOTE_BATCH`; the vectors are normalised again here, so every
provider's are unit length whatever the service returns.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from app.core.embeddings.provider import (
    LOCAL_DIMENSION,
    LOCAL_MODEL_NAME,
    EmbeddingProvider,
    EmbeddingUnavailable,
    check_texts,
    normalise,
    record_batch,
)

__all__ = ["KNOWN_DIMENSIONS", "REMOTE_BATCH", "OllamaEmbedder", "OpenAIEmbedder"]

REMOTE_BATCH = 128

# The dimension of well-known models, so that configuring one needs no dimension
KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
    "nomic-embed-text": 768,
    "mxbai-embed-large": 1024,
    "all-minilm": 384,
    "bge-m3": 1024,
    LOCAL_MODEL_NAME.lower(): LOCAL_DIMENSION,
}


class _HttpEmbedder(EmbeddingProvider):
    """Shared plumbing of the HTTP providers: client, batching, errors, normalisation."""

    path = ""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        dimension: int | None,
        timeout: float,
        headers: dict[str, str] | None = None,
        check_ttl: float = 30.0,
    ) -> None:
        known = KNOWN_DIMENSIONS.get(model.split(":")[0].lower())
        if dimension is None and known is None:
            raise ValueError(f"dimension is required for embedding model {model!r}")
        self.base_url, self.model, self.dimension = base_url.rstrip("/"), model, dimension or known or 0
        self.timeout, self.check_ttl, self._headers = timeout, check_ttl, headers or {}
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._ok_at: float | None = None

    def _http(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:  # connection pools are loop-bound
            self._client = httpx.AsyncClient(timeout=self.timeout, headers=self._headers)
            self._client_loop = loop
        return self._client

    async def start(self) -> None:
        """Open the HTTP client."""
        self._http()

    async def close(self) -> None:
        """Close the HTTP client."""
        if self._client is not None and self._client_loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = None

    def loaded(self) -> bool:
        """Whether the service has answered a request successfully."""
        return self._ok_at is not None

    @abc.abstractmethod
    def _payload(self, texts: list[str]) -> dict[str, Any]: ...

    @abc.abstractmethod
    def _parse(self, body: Any) -> Any: ...

    async def _request(self, texts: list[str]) -> np.ndarray:
        url = self.base_url + self.path
        what = f"{self.provider} embeddings at {url}"
        try:
            response = await self._http().post(url, json=self._payload(texts))
        except httpx.HTTPError as exc:
            raise EmbeddingUnavailable(f"{what}: {type(exc).__name__}") from exc
        if not response.is_success:
            raise EmbeddingUnavailable(f"{what}: HTTP {response.status_code} {response.text[:200].strip()}")
        try:
            vectors = np.asarray(self._parse(response.json()), dtype=np.float32)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise EmbeddingUnavailable(f"{what}: unexpected response") from exc
        if vectors.shape != (len(texts), self.dimension):
            raise EmbeddingUnavailable(
                f"{what}: vectors of shape {vectors.shape}, expected ({len(texts)}, {self.dimension})"
            )
        return vectors

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts`` in requests of up to 128; vectors are re-normalised here."""
        check_texts(texts)
        out: list[list[float]] = []
        for start in range(0, len(texts), REMOTE_BATCH):
            chunk = list(texts[start : start + REMOTE_BATCH])
            started = time.perf_counter()
            vectors = await self._request(chunk)
            record_batch(len(chunk), started)
            out.extend(normalise(vectors).tolist())
            self._ok_at = time.monotonic()
        return out

    async def check(self) -> None:
        """Embed a probe text, at most once per ``check_ttl`` seconds after a success."""
        if self._ok_at is None or time.monotonic() - self._ok_at >= self.check_ttl:
            await self.embed(["ok"])


class OpenAIEmbedder(_HttpEmbedder):
    """Any OpenAI-compatible embeddings API: ``POST {base_url}/embeddings``.

    ``base_url`` includes the version prefix, as in the OpenAI SDK: ``https://api.openai.com/v1``.
    """

    provider, path = "openai", "/embeddings"

    def __init__(
        self,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        model: str = "text-embedding-3-small",
        dimension: int | None = None,
        timeout: float = 30.0,
    ) -> None:
        auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        super().__init__(base_url=base_url, model=model, dimension=dimension, timeout=timeout, headers=auth)

    def _payload(self, texts: list[str]) -> dict[str, Any]:
        # OpenAI rejects empty strings; a single space embeds as "nothing" too.
        payload: dict[str, Any] = {"model": self.model, "input": [t or " " for t in texts]}
        payload["encoding_format"] = "float"
        if self.model.startswith("text-embedding-3") and KNOWN_DIMENSIONS.get(self.model) != self.dimension:
            payload["dimensions"] = self.dimension  # v3 models can shorten their vectors
        return payload

    def _parse(self, body: Any) -> Any:
        return [d["embedding"] for d in sorted(body["data"], key=lambda d: d.get("index", 0))]


class OllamaEmbedder(_HttpEmbedder):
    """Ollama's embedding API: ``POST {base_url}/api/embed`` with ``{"model", "input"}``."""

    provider, path = "ollama", "/api/embed"

    def __init__(
        self,
        *,
        base_url: str = "http://127.0.0.1:11434",
        model: str = "nomic-embed-text",
        dimension: int | None = None,
        timeout: float = 30.0,
    ) -> None:
        super().__init__(base_url=base_url, model=model, dimension=dimension, timeout=timeout)

    def _payload(self, texts: list[str]) -> dict[str, Any]:
        return {"model": self.model, "input": texts}

    def _parse(self, body: Any) -> Any:
        return body["embeddings"]
