"""app/graph/cli.py: `cairn graph import FILE` and `cairn graph export` on a database of their own, a
memory file in the reference server's JSONL format going in and coming back out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import build_parser, runtime
from app.core.config import Settings
from tests.support.databases import migrated_url
from tests.support.server import PgCluster

MEMORY_FILE = [
    {"type": "entity", "name": "Ada Lovelace", "entityType": "person", "observations": ["wrote the first program"]},
    {"type": "entity", "name": "Analytical Engine", "entityType": "machine", "observations": ["never finished"]},
    {"type": "relation", "from": "Ada Lovelace", "to": "Analytical Engine", "relationType": "programmed"},
]


def _run(argv: list[str], settings: Settings) -> int:
    args = build_parser().parse_args(argv)
    args.runtime = runtime(settings, light=False)
    code: int = args.fn(args)
    return code


def test_a_memory_file_imports_and_exports_again(
    pg: PgCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(database_url=migrated_url(pg, ["graph"]), features=["graph"])
    source = tmp_path / "memory.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in MEMORY_FILE), encoding="utf-8")
    assert _run(["graph", "import", str(source), "--project", "lab"], settings) == 0
    said = capsys.readouterr().err.splitlines()
    # the vectors are made after the import's bar, under a bar of their own (no silent wait)
    assert [line.split(":")[0] for line in said] == ["importing", "embed all-MiniLM-L6-v2"]
    assert said[0].startswith("importing: 3 done") and said[1].startswith("embed all-MiniLM-L6-v2: 2 done"), said
    exported = tmp_path / "out.jsonl"
    assert _run(["graph", "export", "--project", "lab", "-o", str(exported)], settings) == 0
    lines = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    entities = {e["name"]: e for e in lines if e["type"] == "entity"}
    assert set(entities) == {"Ada Lovelace", "Analytical Engine"}
    assert entities["Ada Lovelace"]["entityType"] == "person"
    assert entities["Ada Lovelace"]["observations"] == ["wrote the first program"]
    relations = [(r["from"], r["relationType"], r["to"]) for r in lines if r["type"] == "relation"]
    assert relations == [("Ada Lovelace", "programmed", "Analytical Engine")]
    assert _run(["graph", "export", "--project", "lab"], settings) == 0  # to stdout, the same lines
    assert capsys.readouterr().out == exported.read_text(encoding="utf-8")
    assert _run(["graph", "export", "--project", "elsewhere"], settings) == 0
    assert capsys.readouterr().out == ""  # another project holds nothing


def test_a_missing_file_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["graph", "import", "/no/such/memory.jsonl"])
    assert "no such file" in capsys.readouterr().err
