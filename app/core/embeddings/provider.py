"""The embedding provider contract: what every provider offers, the caller its texts belong to, and the
metrics every provider reports.

Every provider returns L2-normalised float vectors in input order; `app.core.embeddings.local` runs
all-MiniLM-L6-v2 in the process, `app.core.embeddings.remote` calls an OpenAI-compatible or Ollama
service, and `app.core.embeddings.providers.build_embedder` makes the configured one.
"""

from __future__ import annotations

import abc
import contextvars
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from prometheus_client import Counter, Histogram

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2"
LOCAL_DIMENSION = 384

BATCH_SIZE = Histogram(
    "cairn_embedding_batch_size",
    "Texts per embedding batch (ONNX run or HTTP request)",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128),
)
TEXTS_TOTAL = Counter("cairn_embedding_texts_total", "Texts embedded")
BATCH_SECONDS = Histogram(
    "cairn_embedding_batch_seconds",
    "Wall time of one embedding batch",
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)


_CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("cairn_embedding_caller", default="")


def set_embedding_caller(caller: str) -> None:
    """Name the caller whose texts the current task (and the tasks it starts) embeds: the local
    batcher shares the model between callers in turn. ``CallContext`` sets it for every call (the
    key and its project); work outside a call (the queue's workers) shares the unnamed caller."""
    _CALLER.set(caller)


def embedding_caller() -> str:
    """The caller named for the current task ("" outside any call)."""
    return _CALLER.get()


class EmbeddingUnavailable(RuntimeError):
    """The embedding model cannot be loaded or the embedding service cannot be reached."""


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Each row of `vectors` scaled to unit length (an all-zero row stays zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)  # an all-zero vector stays zero


def check_texts(texts: Sequence[str]) -> None:
    """TypeError unless `texts` is a sequence of str."""
    # A bare str is a Sequence[str] too; embedding it character by character is never meant.
    if isinstance(texts, str) or any(not isinstance(t, str) for t in texts):
        raise TypeError("embed() takes a sequence of str")


@dataclass(frozen=True)
class Calibration:
    """Where a model's cosine similarities fall (`app.core.embeddings.calibration`): what a question and a
    text about something else stay below, and what a text that answers it typically reaches; `source`
    says where the figures come from."""

    unrelated: float
    related: float
    source: Literal["declared", "measured", "assumed"] = "declared"

    def at(self, share: float) -> float:
        """The cosine `share` of the way from `unrelated` (0) to `related` (1): a default threshold a
        family states as a share, so that it fits whatever model is in use."""
        return (1.0 - share) * self.unrelated + share * self.related


class EmbeddingProvider(abc.ABC):
    """An embedding backend. ``model`` names the vectors it makes (the key they are stored under);
    ``calibration`` is its declared `Calibration`, None to have the server measure it."""

    provider: str
    model: str
    dimension: int
    calibration: Calibration | None = None

    @abc.abstractmethod
    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts``: one L2-normalised vector per text, in order; ``[]`` for no texts."""

    async def embed_one(self, text: str) -> list[float]:
        """Embed a single text."""
        return (await self.embed([text]))[0]

    async def embed_background(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts`` for background work that nobody waits on (the embedding queue's workers):
        a provider may run it at a lower priority than interactive calls. Default: :meth:`embed`."""
        return await self.embed(texts)

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Prepare for use (cheap: models still load lazily)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; pending calls fail with :class:`EmbeddingUnavailable`."""

    @abc.abstractmethod
    def loaded(self) -> bool:
        """Whether the model is loaded (local) or the service has answered (remote)."""

    @abc.abstractmethod
    async def check(self) -> None:
        """Raise :class:`EmbeddingUnavailable` unless the provider can embed now (for readiness)."""


def record_batch(size: int, started: float) -> None:
    """Count one batch of `size` texts that began at `started` (`time.perf_counter()`) in the metrics."""
    BATCH_SIZE.observe(size)
    BATCH_SECONDS.observe(time.perf_counter() - started)
    TEXTS_TOTAL.inc(size)
