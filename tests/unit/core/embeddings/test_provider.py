"""app/core/embeddings/provider.py: the caller a task's texts belong to, the shared checks and metrics."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from prometheus_client import REGISTRY

from app.core.embeddings.provider import (
    check_texts,
    embedding_caller,
    normalise,
    record_batch,
    set_embedding_caller,
)


async def test_the_caller_is_the_current_tasks_and_its_childrens() -> None:
    async def named(caller: str) -> tuple[str, str]:
        set_embedding_caller(caller)
        await asyncio.sleep(0)
        child = await asyncio.create_task(asyncio.sleep(0, result=embedding_caller()))
        return embedding_caller(), child

    # Whatever this test's context holds (a synchronous test before it may have named a caller in it).
    before = embedding_caller()
    assert list(await asyncio.gather(named("k1/a"), named("k2/b"))) == [("k1/a", "k1/a"), ("k2/b", "k2/b")]
    assert embedding_caller() == before  # a task's name stays in it


def test_normalise_scales_rows_to_unit_length_and_keeps_zero_rows() -> None:
    out = normalise(np.array([[3.0, 4.0], [0.0, 0.0]]))
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]])


def test_texts_are_a_sequence_of_str() -> None:
    check_texts(["a", "b"])
    check_texts([])
    for bad in ("a bare string", ["a", 1], [None]):
        with pytest.raises(TypeError):
            check_texts(bad)  # type: ignore[arg-type]


def test_a_batch_is_counted_in_the_metrics() -> None:
    def texts() -> float:
        return REGISTRY.get_sample_value("cairn_embedding_texts_total") or 0.0

    before = texts()
    record_batch(5, time.perf_counter())
    assert texts() == before + 5
