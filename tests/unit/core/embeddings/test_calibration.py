"""app/core/embeddings/calibration.py: the local model's declared figures are what measuring gives,
the figures from vectors, and a model measured once per process (or assumed while unreachable)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from app.core.embeddings import calibration
from app.core.embeddings.calibration import LOCAL, PAIRS, Calibration, calibration_of, from_vectors, measure
from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.embeddings.provider import EmbeddingProvider, EmbeddingUnavailable


async def test_the_local_models_declared_calibration_is_what_measuring_it_gives() -> None:
    embedder = LocalOnnxEmbedder()
    try:
        measured = await measure(embedder)
        assert (measured.unrelated, measured.related) == pytest.approx((LOCAL.unrelated, LOCAL.related), abs=0.01)
        assert measured.source == "measured" and await calibration_of(embedder) is LOCAL
    finally:
        await embedder.close()


def test_figures_are_percentiles_of_matching_and_crossed_pairs() -> None:
    # Three pairs in 3-d: each answer equals its question; crossed pairs are orthogonal.
    eye = np.eye(3)
    assert from_vectors(eye, eye) == Calibration(unrelated=0.0, related=1.0, source="measured")
    half = np.array([[1.0, 0.0], [0.0, 1.0]])
    tilted = np.array([[0.6, 0.8], [0.8, 0.6]])
    figures = from_vectors(half, tilted)
    assert figures.related == pytest.approx(0.6) and figures.unrelated == pytest.approx(0.8)


class Scaled(EmbeddingProvider):
    """A model whose every cosine is high: answers and questions share a common direction."""

    provider, model, dimension = "test", "scaled-model", 4

    def __init__(self, fail: bool = False) -> None:
        self.calls, self.fail = 0, fail

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        if self.fail:
            raise EmbeddingUnavailable("down")
        out = []
        for i, _ in enumerate(texts):
            v = np.array([3.0, 0.0, 0.0, 0.0])
            v[1 + (i // 2) % 3] = 1.0  # a pair shares its direction; other pairs share only the first axis
            out.append((v / np.linalg.norm(v)).tolist())
        return out

    def loaded(self) -> bool:
        return True

    async def check(self) -> None:
        return None


async def test_an_undeclared_model_is_measured_once_and_an_unreachable_one_is_assumed_local() -> None:
    calibration.forget()
    model = Scaled()
    first = await calibration_of(model)
    assert first.source == "measured" and first.unrelated >= 0.9 > LOCAL.unrelated
    assert first.related == pytest.approx(1.0)
    assert await calibration_of(model) is first and model.calls == 1
    down = Scaled(fail=True)
    down.model = "unreachable-model"
    assumed = await calibration_of(down)
    assert (assumed.unrelated, assumed.related, assumed.source) == (LOCAL.unrelated, LOCAL.related, "assumed")
    down.fail = False
    assert (await calibration_of(down)).source == "measured"  # measured once the model answers
    assert len(PAIRS) >= 20
    calibration.forget()


def test_a_share_of_the_way_from_unrelated_to_related() -> None:
    assert LOCAL.at(0.0) == LOCAL.unrelated and LOCAL.at(1.0) == LOCAL.related
    assert LOCAL.at(0.5) == (LOCAL.unrelated + LOCAL.related) / 2
    assert Calibration(0.65, 0.85).at(0.75) == pytest.approx(0.8)
