"""`cairn eval beir DIR`: index a BEIR-format dataset into a scratch collection and report nDCG@10 and
R@100 of each search mode (plus query latency), using the same search engine as the tools."""

from __future__ import annotations

import gzip
import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ir_measures
from ir_measures import R, nDCG

from app.core.db import Database
from app.core.embeddings.provider import EmbeddingProvider
from app.core.repository import ProjectRepository
from app.memory.config import MemorySettings
from app.memory.repository import MemoryRepository, Scope
from app.memory.schemas import SearchMode
from app.memory.service_common import EMBEDDING_TARGET
from app.memory.service_search import retrieve

EVAL_PROJECT = "beir-eval"
MODES: tuple[SearchMode, ...] = ("hybrid", "semantic", "lexical")


@dataclass
class Dataset:
    """A BEIR dataset: corpus, queries and the judgements of one split."""

    name: str
    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def load(directory: Path, split: str) -> Dataset:
    """Read corpus.jsonl[.gz], queries.jsonl[.gz] and qrels/<split>.tsv."""

    def find(stem: str) -> Path:
        for candidate in (directory / f"{stem}.jsonl", directory / f"{stem}.jsonl.gz"):
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(f"{directory} has no {stem}.jsonl or {stem}.jsonl.gz")

    corpus = {str(d["_id"]): f"{d.get('title') or ''} {d.get('text') or ''}".strip() for d in _lines(find("corpus"))}
    queries = {str(q["_id"]): str(q["text"]) for q in _lines(find("queries"))}
    qrels: dict[str, dict[str, int]] = {}
    qrels_path = directory / "qrels" / f"{split}.tsv"
    with open(qrels_path, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or (i == 0 and not parts[2].strip().lstrip("-").isdigit()):
                continue
            qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    qrels = {q: rel for q, rel in qrels.items() if q in queries}
    return Dataset(name=directory.name, corpus=corpus, queries=queries, qrels=qrels)


MEASURES = (nDCG @ 10, R @ 100)


def quality(rankings: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """Mean nDCG@10 and recall@100 over every query of `rankings` (ir-measures, i.e. trec_eval's
    definitions as BEIR reports them); a query that retrieved nothing counts as 0."""
    run: dict[str, dict[str, float]] = {}
    for qid, ranked in rankings.items():
        scores = run.setdefault(qid, {})
        for i, doc in enumerate(ranked):
            if doc and doc not in scores:
                scores[doc] = float(len(ranked) - i)  # strictly decreasing: trec_eval ranks by score
    per_query: dict[str, dict[str, float]] = {str(m): {} for m in MEASURES}
    judged = {q: rel for q, rel in qrels.items() if q in rankings}
    for metric in ir_measures.iter_calc(list(MEASURES), judged, {q: r for q, r in run.items() if r}):
        per_query[str(metric.measure)][metric.query_id] = float(metric.value)
    n = max(len(rankings), 1)
    return {name: sum(values.values()) / n for name, values in per_query.items()}


def collection_name(dataset: str) -> str:
    """The scratch collection of a dataset."""
    return "beir-" + re.sub(r"[^A-Za-z0-9_.\-]", "-", dataset)[:100]


async def index(
    db: Database, embedder: EmbeddingProvider, data: Dataset, *, fresh: bool, batch: int = 64, progress: Any = None
) -> tuple[uuid.UUID, uuid.UUID, float]:
    """Index the corpus (one memory per document) unless an identical index exists; returns the project
    and collection ids and the seconds spent indexing."""
    name = collection_name(data.name)
    async with db.transaction() as session:
        project = await ProjectRepository(session).ensure(EVAL_PROJECT)
        repo = MemoryRepository(session)
        coll = await repo.get_collection(name)
        if coll is not None and fresh:
            await repo.delete_collection(coll.id)
            coll = None
        if coll is None:
            coll, _ = await repo.ensure_collection(name, embedder.model, embedder.dimension)
        have = await repo.count(Scope(project_id=project.id, collection_id=coll.id))
        missing = await repo.count_missing(embedder.model, project.id)
        project_id, coll_id = project.id, coll.id
    if have == len(data.corpus) and missing == 0:
        return project_id, coll_id, 0.0
    started = time.perf_counter()
    docs = list(data.corpus.items())
    if have != len(data.corpus):
        async with db.transaction() as session:
            await MemoryRepository(session).clear_collection(coll_id)
            rows: list[dict[str, Any]] = [
                {
                    "id": uuid.uuid4(),
                    "project_id": project_id,
                    "collection_id": coll_id,
                    "kind": "chunk",
                    "memory_type": "semantic",
                    "content": body,
                    "content_hash": str(i),
                    "tags": [],
                    "metadata": "{}",
                    "source_uri": f"beir:{doc_id}",
                    "document_id": None,
                    "chunk_index": 0,
                    "summary_key": None,
                }
                for i, (doc_id, body) in enumerate(docs)
            ]
            for start in range(0, len(rows), 1000):
                await MemoryRepository(session).insert_memories(rows[start : start + 1000])
    while True:
        async with db.transaction() as session:
            todo = await MemoryRepository(session).missing_embeddings(embedder.model, project_id, False, 0, batch * 8)
        if not todo:
            break
        for start in range(0, len(todo), batch):
            part = todo[start : start + batch]
            vectors = await embedder.embed([r["content"] for r in part])  # no transaction open meanwhile
            async with db.transaction() as session:
                await EMBEDDING_TARGET.store(
                    session, embedder.model, [(str(r["id"]), v) for r, v in zip(part, vectors, strict=True)]
                )
            if progress is not None:
                progress(len(part))
    return project_id, coll_id, time.perf_counter() - started


async def evaluate(
    db: Database,
    embedder: EmbeddingProvider,
    settings: MemorySettings,
    data: Dataset,
    project_id: uuid.UUID,
    coll_id: uuid.UUID,
    modes: tuple[SearchMode, ...] = MODES,
    max_queries: int | None = None,
) -> dict[str, dict[str, float]]:
    """Run every judged query in each mode; nDCG@10, R@100 and latency percentiles per mode."""
    async with db.transaction() as session:
        sources = await MemoryRepository(session).sources_of(coll_id)
    doc_of = {memory_id: str(uri).removeprefix("beir:") for memory_id, uri in sources.items()}
    query_ids = sorted(data.qrels)[: max_queries or None]
    scope = Scope(project_id=project_id, collection_id=coll_id)
    report: dict[str, dict[str, float]] = {}
    for mode in modes:
        rankings: dict[str, list[str]] = {}
        latencies: list[float] = []
        for qid in query_ids:
            started = time.perf_counter()
            async with db.transaction() as session:
                found = await retrieve(
                    MemoryRepository(session),
                    embedder,
                    settings,
                    scope,
                    data.queries[qid],
                    mode=mode,
                    limit=100,
                    threshold=0.0,
                )
            latencies.append((time.perf_counter() - started) * 1000)
            rankings[qid] = [doc_of.get(h.id, "") for h in found.hits]
        latencies.sort()
        scores = quality(rankings, data.qrels)
        report[mode] = {
            "ndcg@10": round(scores["nDCG@10"], 4) if rankings else 0.0,
            "recall@100": round(scores["R@100"], 4) if rankings else 0.0,
            "p50_ms": round(latencies[len(latencies) // 2], 1) if latencies else 0.0,
            "p95_ms": round(latencies[int(len(latencies) * 0.95)], 1) if latencies else 0.0,
            "queries": len(rankings),
        }
    return report


async def drop(db: Database, collection_id: uuid.UUID) -> None:
    """Delete the scratch collection (its memories go with it)."""
    async with db.transaction() as session:
        await MemoryRepository(session).delete_collection(collection_id)


def markdown(dataset: str, split: str, report: dict[str, dict[str, float]], model: str, docs: int) -> str:
    """The report as a markdown table."""
    lines = [
        f"BEIR {dataset} ({split} split, {docs} documents, model {model})",
        "",
        "| mode | nDCG@10 | R@100 | p50 ms | p95 ms | queries |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for mode, m in report.items():
        lines.append(
            f"| {mode} | {m['ndcg@10']:.3f} | {m['recall@100']:.3f} | {m['p50_ms']} | {m['p95_ms']} | "
            f"{int(m['queries'])} |"
        )
    return "\n".join(lines)
