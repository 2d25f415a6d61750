"""The configured embedding provider (`build_embedder`): the local model or an HTTP service."""

from __future__ import annotations

from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.embeddings.provider import LOCAL_DIMENSION, LOCAL_MODEL_NAME, EmbeddingProvider
from app.core.embeddings.remote import OllamaEmbedder, OpenAIEmbedder

__all__ = ["build_embedder"]


def build_embedder(
    provider: str,
    *,
    model: str | None = None,
    dimension: int | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    model_path: str | None = None,
    tokenizer_path: str | None = None,
    workers: int = 1,
    max_batch: int = 32,
    max_wait_ms: float = 5.0,
    max_length: int = 256,
    timeout: float = 30.0,
    background_nice: int = 0,
    max_batch_tokens: int | None = None,
) -> EmbeddingProvider:
    """Make the configured provider: ``"local"``, ``"openai"`` or ``"ollama"``.

    ``local`` always serves ``all-MiniLM-L6-v2`` (384-d); ``model_path``, ``tokenizer_path``,
    ``workers``, ``max_batch``, ``max_batch_tokens``, ``max_wait_ms``, ``max_length`` and
    ``background_nice`` apply to it only. The HTTP
    providers need ``dimension`` unless the model is a well-known one, and send at most 128
    texts per request. Raises ``ValueError`` for an unknown provider or inconsistent settings.
    """
    name = provider.strip().lower()
    if name == "local":
        if model is not None and model.split("/")[-1].lower() != LOCAL_MODEL_NAME.lower():
            raise ValueError(f"the local provider serves {LOCAL_MODEL_NAME} only, not {model!r}")
        if dimension is not None and dimension != LOCAL_DIMENSION:
            raise ValueError(f"{LOCAL_MODEL_NAME} makes {LOCAL_DIMENSION}-d vectors, not {dimension}")
        return LocalOnnxEmbedder(
            model_path=model_path,
            tokenizer_path=tokenizer_path,
            workers=workers,
            max_batch=max_batch,
            max_wait_ms=max_wait_ms,
            max_length=max_length,
            background_nice=background_nice,
            max_batch_tokens=max_batch_tokens,
        )
    if name == "openai":
        return OpenAIEmbedder(
            base_url=base_url or "https://api.openai.com/v1",
            api_key=api_key,
            model=model or "text-embedding-3-small",
            dimension=dimension,
            timeout=timeout,
        )
    if name == "ollama":
        return OllamaEmbedder(
            base_url=base_url or "http://127.0.0.1:11434",
            model=model or "nomic-embed-text",
            dimension=dimension,
            timeout=timeout,
        )
    raise ValueError(f"unknown embedding provider {provider!r} (expected local, openai or ollama)")
