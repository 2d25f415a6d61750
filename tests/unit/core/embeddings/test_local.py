"""app/core/embeddings/local.py: the local provider, on the real int8 ONNX model. Reference vectors come
from the fp32 weights (scripts/make_reference_vectors.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import REGISTRY

from app.core.embeddings import cpus, tokens
from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.embeddings.provider import EmbeddingUnavailable, embedding_caller, set_embedding_caller

REFERENCE = json.loads((Path(__file__).resolve().parents[3] / "fixtures" / "reference_vectors.json").read_text("utf-8"))
# int8 weights versus the fp32 reference. With three or more words the error averages out
# (measured minimum 0.9991); one- and two-word texts show more of it (measured: "x" 0.9985,
# "Hello world" 0.9990; single punctuation tokens go down to 0.9955).
MIN_COSINE = 0.999
MIN_COSINE_SHORT = 0.995


def cosine(a: Any, b: Any) -> float:
    va, vb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb)))


@pytest.fixture(scope="module")
def local() -> Iterator[LocalOnnxEmbedder]:
    embedder = LocalOnnxEmbedder()
    yield embedder
    asyncio.run(embedder.close())


def batch_count() -> float:
    return REGISTRY.get_sample_value("cairn_embedding_batch_size_count") or 0.0


# -- local ONNX provider ---------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_fidelity_against_fp32_reference(local: LocalOnnxEmbedder) -> None:
    assert REFERENCE["model"] == local.model == "all-MiniLM-L6-v2"
    assert REFERENCE["max_length"] == local.max_length == 256
    texts = [item["text"] for item in REFERENCE["items"]]
    vectors = await local.embed(texts)
    assert local.loaded() and local.dimension == 384
    for item, vector in zip(REFERENCE["items"], vectors, strict=True):
        assert len(vector) == 384
        assert abs(np.linalg.norm(vector) - 1.0) < 1e-5
        floor = MIN_COSINE if len(item["text"].split()) >= 3 else MIN_COSINE_SHORT
        assert cosine(vector, item["vector"]) >= floor, item["text"][:40]


@pytest.mark.asyncio
async def test_truncation_at_256_tokens(local: LocalOnnxEmbedder) -> None:
    words = "river stone memory cairn agent vector search index query path".split()
    text = " ".join(words[i % len(words)] for i in range(2000))
    prefix = tokens.truncate_to_tokens(text, 254)  # 256 minus [CLS] and [SEP]
    assert tokens.count_tokens(prefix) == 254 < tokens.count_tokens(text)
    full, cut = await local.embed([text, prefix])
    assert cosine(full, cut) >= 0.999


@pytest.mark.asyncio
async def test_micro_batching_coalesces_concurrent_callers(local: LocalOnnxEmbedder) -> None:
    texts = [f"memory {i}: the agent stored note number {i} about topic {i % 7}" for i in range(64)]
    singles = [await local.embed_one(t) for t in texts[:8]]
    before_runs, before_hist = local.batches_run, batch_count()
    results = await asyncio.gather(*(local.embed_one(t) for t in texts))
    runs = local.batches_run - before_runs
    assert runs <= 8, f"{runs} batches for 64 concurrent callers"
    assert batch_count() - before_hist == runs
    for single, batched in zip(singles, results, strict=False):
        assert cosine(single, batched) >= 0.9999
    for text, batched in zip(texts[8:], results[8:], strict=True):  # spot check the rest
        if text.endswith("0"):
            assert cosine(await local.embed_one(text), batched) >= 0.9999
    assert REGISTRY.get_sample_value("cairn_embedding_queue_depth") == 0


@pytest.mark.asyncio
async def test_large_call_is_split_into_max_batch(local: LocalOnnxEmbedder) -> None:
    before = local.batches_run
    vectors = await local.embed([f"text {i}" for i in range(70)])
    assert len(vectors) == 70
    assert local.batches_run - before == 3  # 32 + 32 + 6


@pytest.mark.asyncio
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread priorities are per thread on Linux only")
async def test_background_batches_run_at_a_lower_priority_with_the_same_vectors(local: LocalOnnxEmbedder) -> None:
    texts = ["the queue embeds this later", "a second text of the batch", "x"]
    background = LocalOnnxEmbedder(background_nice=7, max_batch=2)
    try:
        vectors = await background.embed_background(texts)
        assert [round(cosine(a, b), 6) for a, b in zip(vectors, await local.embed(texts), strict=True)] == [1.0] * 3
        assert background.batches_run == 2  # split at max_batch, outside the micro-batcher
        assert background._background is not None
        executor, session = background._background
        # One core's worth: on a two-core host the other core stays with the calls being answered.
        assert session.get_session_options().intra_op_num_threads == 1
        assert background._sessions[0].get_session_options().intra_op_num_threads == 2
        (worker,) = executor._threads
        assert worker.native_id is not None
        base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        assert os.getpriority(os.PRIO_PROCESS, worker.native_id) == min(19, base + 7)
        # ... and kept off one core where there are two or more (`app.core.embeddings.cpus`)
        assert cpus.cpus_of(worker.native_id) == (cpus.background_cpus() or cpus.all_cpus())
        assert cpus.cpus_of(threading.get_native_id()) == cpus.all_cpus()
        # onnxruntime's own threads of that session inherit it: every thread above the base is ours.
        lowered = [int(t) for t in os.listdir("/proc/self/task") if os.getpriority(os.PRIO_PROCESS, int(t)) > base]
        assert worker.native_id in lowered
    finally:
        await background.close()
    # With 0, background work goes through the micro-batcher like any call.
    plain = LocalOnnxEmbedder()
    try:
        assert len(await plain.embed_background(texts)) == 3 and plain._background is None
    finally:
        await plain.close()


@pytest.mark.asyncio
async def test_order_preserved_for_mixed_lengths(local: LocalOnnxEmbedder) -> None:
    texts = [
        "a long sentence " * 40,
        "short",
        "",
        "medium length sentence about databases",
        "北京",
        "x " * 300,
        "def f(x):\n    return x * 2",
        "tiny",
    ]
    batched = await local.embed(texts)
    for text, vector in zip(texts, batched, strict=True):
        assert cosine(await local.embed_one(text), vector) >= 0.9999


async def _as_caller(embedder: LocalOnnxEmbedder, caller: str, texts: list[str]) -> list[list[float]]:
    set_embedding_caller(caller)  # this task's context only
    return await embedder.embed(texts)


@pytest.mark.asyncio
async def test_callers_take_turns_so_a_small_request_is_not_queued_behind_a_large_one() -> None:
    embedder = LocalOnnxEmbedder(max_batch=4, max_wait_ms=0)
    before = embedding_caller()  # whatever this test's context holds
    try:
        await embedder.check()
        bulk = [f"bulk text number {i} about the quarterly report" for i in range(48)]
        ran_when_done: dict[str, int] = {}
        start = embedder.batches_run

        async def timed(label: str, caller: str, texts: list[str]) -> list[list[float]]:
            out = await _as_caller(embedder, caller, texts)
            ran_when_done[label] = embedder.batches_run - start
            return out

        # Two large calls of one caller (a key and its project), then another caller's one query.
        big = asyncio.create_task(timed("push 1", "key-a/alpha", bulk))
        big_too = asyncio.create_task(timed("push 2", "key-a/alpha", bulk[::-1]))
        await asyncio.sleep(0)  # both are queued: 24 batches of 4
        small = await asyncio.create_task(timed("search", "key-b/beta", ["one search query"]))
        vectors, reverse = await big, await big_too
        # The query came in behind 24 batches' worth of texts, and was in the next batch or the one after.
        assert ran_when_done["search"] <= 2, ran_when_done
        assert min(ran_when_done["push 1"], ran_when_done["push 2"]) >= 12 and embedder.batches_run - start >= 24
        assert cosine(small[0], await embedder.embed_one("one search query")) >= 0.9999
        assert [round(cosine(a, b), 4) for a, b in zip(vectors, reverse[::-1], strict=True)] == [1.0] * 48
        assert embedding_caller() == before  # the tasks' callers stayed in their tasks
    finally:
        await embedder.close()
    assert REGISTRY.get_sample_value("cairn_embedding_queue_depth") == 0


@pytest.mark.asyncio
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread priorities are per thread on Linux only")
async def test_bulk_calls_run_on_the_low_priority_session_in_bounded_batches() -> None:
    embedder = LocalOnnxEmbedder(background_nice=5, max_batch_tokens=600, max_wait_ms=0)
    try:
        await embedder.check()
        long_text = "a paragraph of a large pushed document, chunk by chunk " * 30  # 256 tokens (cut)
        assert embedder._token_batches([long_text] * 5 + ["x"]) == [[long_text] * 2] * 2 + [[long_text, "x"]]
        assert embedder._token_batches(["y" * 5000]) == [["y" * 5000]]  # a batch holds at least one text
        bulk = asyncio.create_task(_as_caller(embedder, "key-a/alpha", [long_text] * 24))  # 24 x 256 > 600
        for _ in range(6000):  # up to 30 s: on the background session (made on first use)
            if embedder._background is not None and embedder.batches_run > 0:
                break
            await asyncio.sleep(0.005)
        else:
            pytest.fail("the bulk call never ran on the background session")
        # Another caller's query meanwhile: it goes through the batcher and its own session, not after
        # the bulk call's batches.
        query = await _as_caller(embedder, "key-b/beta", ["one search query"])
        assert not bulk.done(), "the query waited for the bulk call"
        assert embedder._queued == 0
        vectors = await bulk
        assert len(vectors) == 24 and cosine(vectors[0], vectors[-1]) >= 0.9999
        assert cosine(query[0], await embedder.embed_one("one search query")) >= 0.9999
        executor, _ = embedder._background
        (worker,) = executor._threads
        assert worker.native_id is not None
        base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        assert os.getpriority(os.PRIO_PROCESS, worker.native_id) == min(19, base + 5)
        # A call within one batch's budget stays on the batcher (normal priority).
        runs = embedder.batches_run
        assert len(await embedder.embed([long_text, long_text])) == 2 and embedder.batches_run == runs + 1
    finally:
        await embedder.close()


@pytest.mark.asyncio
async def test_batches_are_capped_in_tokens_and_short_texts_are_handed_out_first() -> None:
    embedder = LocalOnnxEmbedder(max_batch_tokens=512, max_wait_ms=50)
    try:
        await embedder.check()
        long_text = "tokens and more tokens for a full window " * 40
        start = embedder.batches_run
        assert len(await embedder.embed([long_text] * 6)) == 6
        assert embedder.batches_run - start == 3  # 256 tokens each, 512 per batch
        done: list[str] = []

        async def one(label: str, text: str) -> None:
            await _as_caller(embedder, label, [text])
            done.append(label)

        # One batch (the budget allows a long text and the short ones): the short run goes first and
        # its callers get their vectors before the long run is done.
        await asyncio.gather(one("long", long_text), one("short", "a short query"), one("tiny", "hi"))
        assert done.index("long") == 2, done
    finally:
        await embedder.close()


@pytest.mark.asyncio
async def test_empty_and_invalid_input(local: LocalOnnxEmbedder) -> None:
    assert await local.embed([]) == []
    with pytest.raises(TypeError):
        await local.embed("not a list")
    with pytest.raises(TypeError):
        await local.embed(["ok", 3])  # type: ignore[list-item]


@pytest.mark.asyncio
async def test_failed_batch_fails_only_its_callers(local: LocalOnnxEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    real_infer = local._infer

    def infer(worker: int, texts: list[str], on_run: Any = None) -> Any:
        if "boom" in texts:
            raise RuntimeError("boom")
        return real_infer(worker, texts, on_run)

    monkeypatch.setattr(local, "_infer", infer)
    results = await asyncio.gather(local.embed_one("boom"), local.embed_one("fine"), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)  # same batch, same fate
    assert len(await local.embed_one("fine")) == 384  # the batcher keeps going


@pytest.mark.asyncio
async def test_close_waits_for_running_batch_and_fails_queued() -> None:
    embedder = LocalOnnxEmbedder(max_batch=1, max_wait_ms=0)
    await embedder.check()
    assert embedder.loaded()
    calls = [asyncio.create_task(embedder.embed_one(f"text {i}")) for i in range(6)]
    for _ in range(1000):  # until the first batch runs and the other five wait
        if embedder._inflight and REGISTRY.get_sample_value("cairn_embedding_queue_depth") == 5:
            break
        await asyncio.sleep(0.001)
    await embedder.close()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(results[0], list) and len(results[0]) == 384
    assert any(isinstance(r, EmbeddingUnavailable) for r in results)
    assert not embedder.loaded()
    assert REGISTRY.get_sample_value("cairn_embedding_queue_depth") == 0


@pytest.mark.asyncio
async def test_check_raises_when_model_missing(tmp_path: Path) -> None:
    embedder = LocalOnnxEmbedder(model_path=str(tmp_path / "missing.onnx"))
    with pytest.raises(EmbeddingUnavailable):
        await embedder.check()
    with pytest.raises(EmbeddingUnavailable):
        await embedder.embed_one("hello")
    assert not embedder.loaded()
