"""app/memory/cli.py: `cairn backfill` and `cairn eval beir DIR` on a database of their own with the
local model: an unknown project refused, a dry run that counts and queues nothing, a real run that
queues and embeds every memory lacking a vector (and then finds none), and a small BEIR dataset indexed
and scored per search mode, with unknown modes refused."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from app.cli import build_parser, runtime
from app.core.config import Settings
from app.core.db import Database
from app.core.repository import ProjectRepository
from app.memory.repository import MemoryRepository
from tests.support.databases import migrated_url
from tests.support.server import PgCluster


def _run(argv: list[str], settings: Settings) -> int:
    args = build_parser().parse_args(argv)
    args.runtime = runtime(settings, light=False)
    code: int = args.fn(args)
    return code


def _last_json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    data: dict[str, Any] = json.loads(lines[-1])
    return data


def _seed(settings: Settings, project: str, n: int) -> None:
    async def insert(db: Database) -> None:
        async with db.transaction() as session:
            pid = await ProjectRepository(session).ensure_id(project)
            coll, _ = await MemoryRepository(session).ensure_collection("cairn-memory", "all-MiniLM-L6-v2", 384)
            await MemoryRepository(session).insert_memories(
                [
                    {
                        "id": uuid.uuid4(),
                        "project_id": pid,
                        "collection_id": coll.id,
                        "kind": "thought",
                        "memory_type": "semantic",
                        "content": f"note number {i} about the tides",
                        "content_hash": f"cli-{uuid.uuid4()}",
                        "tags": [],
                        "metadata": json.dumps({}),
                        "source_uri": None,
                        "document_id": None,
                        "chunk_index": None,
                        "summary_key": None,
                    }
                    for i in range(n)
                ]
            )

    runtime(settings, light=False).run(insert)


def _vectors(settings: Settings) -> int:
    async def count(db: Database) -> int:
        async with db.transaction() as session:
            return int(await session.scalar(text("SELECT count(*) FROM memory_embeddings")) or 0)

    return runtime(settings, light=False).run(count)


def test_backfill_counts_queues_and_embeds_what_lacks_a_vector(
    pg: PgCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(database_url=migrated_url(pg, ["memory"]), features=["memory"])
    assert _run(["backfill", "--project", "nowhere"], settings) == 2
    assert "no project named 'nowhere'" in capsys.readouterr().err
    _seed(settings, "tides", 3)
    _seed(settings, "other", 2)
    assert _run(["backfill", "--project", "tides", "--dry-run"], settings) == 0
    dry = _last_json(capsys)
    assert dry["dry_run"] and dry["scanned"] == 3 and dry["queued"] == 0 and dry["embedded"] == 0
    assert _vectors(settings) == 0
    assert _run(["backfill", "--project", "tides", "--batch-size", "2"], settings) == 0
    done = _last_json(capsys)
    assert (done["scanned"], done["queued"], done["embedded"], done["waiting"]) == (3, 3, 3, 0)
    assert _vectors(settings) == 3  # the other project's memories were left alone
    assert _run(["backfill", "--limit", "1"], settings) == 0
    assert _last_json(capsys)["queued"] == 1 and _vectors(settings) == 4
    assert _run(["backfill", "--project", "tides"], settings) == 0
    assert _last_json(capsys)["scanned"] == 0  # nothing left to do


def _beir(root: Path) -> Path:
    data = root / "tiny"
    (data / "qrels").mkdir(parents=True)
    corpus = [
        {"_id": "d1", "title": "Tides", "text": "The moon pulls the oceans and makes the tides."},
        {"_id": "d2", "title": "Bread", "text": "Sourdough bread rises with a wild yeast starter."},
        {"_id": "d3", "title": "Volcanoes", "text": "Lava flows from an erupting volcano."},
    ]
    queries = [{"_id": "q1", "text": "what causes ocean tides"}, {"_id": "q2", "text": "how does sourdough rise"}]
    (data / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus), encoding="utf-8")
    (data / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n", encoding="utf-8")
    return data


def test_eval_beir_scores_each_mode_and_refuses_unknown_modes(
    pg: PgCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(database_url=migrated_url(pg, ["memory"]), features=["memory"])
    data = _beir(tmp_path)
    assert _run(["eval", "beir", str(data), "--modes", "semantic,telepathy"], settings) == 2
    assert "--modes takes" in capsys.readouterr().err
    assert _run(["eval", "beir", str(data), "--modes", "lexical,semantic", "--json", "--drop"], settings) == 0
    out = _last_json(capsys)
    assert (out["dataset"], out["split"], out["documents"]) == ("tiny", "test", 3)
    report = out["report"]
    assert set(report) == {"lexical", "semantic"}  # the modes asked for, no others
    assert report["semantic"]["queries"] == 2 and report["semantic"]["recall@100"] == 1.0
    assert report["semantic"]["ndcg@10"] > 0.9  # three documents: each query finds its own first
    assert _run(["eval", "beir", str(data), "--modes", "semantic"], settings) == 0
    table = capsys.readouterr().out
    assert table.startswith("BEIR tiny (test split, 3 documents, model all-MiniLM-L6-v2)")
    assert "| semantic |" in table and "| lexical |" not in table and "indexed in" in table  # dropped: indexed again
